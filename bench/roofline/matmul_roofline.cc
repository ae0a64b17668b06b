// A plain-main MatMul roofline report (no Google Benchmark, so it links statically and
// runs on any Linux host): every weight dtype, row-major and packed (when the CPU's
// MatMul level packs that dtype), GEMV GB/s against the read bandwidth measured at the
// start and GEMM GFLOP/s against the dot-product peak measured around each GEMM, best of N
// timed calls.
//
//   pagoda_matmul_roofline [threads] [gemm_tokens] [dtypes]   (defaults: all cores, 512,
//                                                             bf16,q8_0,f16,f32,q4_0)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "probe/roofline.h"

namespace {

using namespace pagoda;
using Clock = std::chrono::steady_clock;

struct Weights {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
  std::shared_ptr<const PackedWeights> packed;
};

std::unique_ptr<Weights> Make(DType dtype, int64_t rows, int64_t cols) {
  auto t = std::make_unique<Weights>();
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  t->bytes.resize(rows * row_bytes);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(dtype, row.data(), t->bytes.data() + r * row_bytes, cols);
  }
  t->w = WeightMatrix{dtype, t->bytes.data(), rows, cols, row_bytes};
  return t;
}

double BestSeconds(const CpuWeight& w, const float* x, int64_t tokens, float* y, int reps) {
  MatMul(w, x, tokens, y);  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto s = Clock::now();
    MatMul(w, x, tokens, y);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - s).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) SetNumThreads(std::atoi(argv[1]));
  const int64_t gemm_tokens = argc > 2 ? std::atoll(argv[2]) : 512;
  const RooflineBounds b = MeasureRoofline();
  std::printf("threads %d, matmul %s, cpu: %s\n", NumThreads(), b.isa.c_str(),
              GetCpuFeatures().ToString().c_str());
  std::printf("bounds: read %.1f GB/s, f32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, int8 dot %.1f GOP/s\n",
              b.read_gbs, b.fma_gflops, b.bf16_gflops, b.int8_gops);
  std::printf("%-6s %-7s %-12s %10s %8s %12s %8s\n", "dtype", "layout", "shape", "GEMV GB/s",
              "of read", "GEMM GFLOP/s", "of peak");
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
  const std::string only = argc > 3 ? argv[3] : "bf16,q8_0,f16,f32,q4_0";
  for (DType d : {DType::kBF16, DType::kQ8_0, DType::kF16, DType::kF32, DType::kQ4_0}) {
    if (("," + only + ",").find("," + std::string(DTypeName(d)) + ",") == std::string::npos) continue;
    for (auto [rows, cols] : shapes) {
      auto t = Make(d, rows, cols);
      std::vector<float> x(gemm_tokens * cols);
      std::mt19937 rng(8);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (auto& v : x) v = dist(rng);
      std::vector<float> y(gemm_tokens * rows);
      for (bool packed : {false, true}) {
        CpuWeight w(t->w);
        if (packed) {
          t->packed = PackWeightsForCpu(t->w);
          if (t->packed == nullptr) continue;
          w.packed = t->packed.get();
        }
        const double gemv = BestSeconds(w, x.data(), 1, y.data(), 20);
        const double gbs = static_cast<double>(rows) * w.row_bytes / gemv / 1e9;
        std::string gemm_cell = "-", gemm_pct = "-";
        if (rows <= 5632) {
          // Against the peak measured just before and just after (the higher): a shared
          // host's clock moves within seconds.
          const bool q = d == DType::kQ8_0 || d == DType::kQ4_0;
          auto peak_now = [&] {
            const RooflineBounds p = MeasureComputePeaks();
            return q ? p.int8_gops : p.fma_gflops;
          };
          const double before = peak_now();
          const double s = BestSeconds(w, x.data(), gemm_tokens, y.data(), 3);
          const double peak = std::max(before, peak_now());
          const double gf = 2.0 * rows * cols * gemm_tokens / s / 1e9;
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.1f", gf);
          gemm_cell = buf;
          std::snprintf(buf, sizeof buf, "%.1f%%", 100 * gf / peak);
          gemm_pct = buf;
        }
        const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
        std::printf("%-6s %-7s %-12s %10.1f %7.0f%% %12s %8s\n", std::string(DTypeName(d)).c_str(),
                    packed ? "packed" : "rows", shape.c_str(), gbs, 100 * gbs / b.read_gbs,
                    gemm_cell.c_str(), gemm_pct.c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
