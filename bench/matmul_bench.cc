// CPU MatMul speed against this machine's measured bounds (probe/roofline.h).
//
//   GEMV (decode, 1 token): GB/s of weight bytes read, and % of the measured read
//     bandwidth (the decode bound).
//   GEMM (prefill, 512 tokens): GFLOP/s (2 * rows * cols * tokens), and % of the
//     measured peak of the instruction the kernel uses (f32 FMA for F32/F16/BF16
//     weights, int8 dot products for Q8_0/Q4_0).
// Shapes: llama-1b's projections (dim 2048, FFN 5632, vocab 32000).
//
//   build-kern/pagoda_bench --benchmark_filter='MatMul|Roofline' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "probe/roofline.h"

namespace pagoda {
namespace {

const RooflineBounds& Bounds() {
  static const RooflineBounds b = [] {
    RooflineBounds r = MeasureRoofline();
    std::fprintf(stderr,
                 "roofline (%d threads, %s; %s): read %.1f GB/s, f32 FMA %.1f GFLOP/s, "
                 "bf16 dot %.1f GFLOP/s, int8 dot %.1f GOP/s\n",
                 NumThreads(), r.isa.c_str(), GetCpuFeatures().ToString().c_str(), r.read_gbs,
                 r.fma_gflops, r.bf16_gflops, r.int8_gops);
    return r;
  }();
  return b;
}

struct BenchWeights {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

const WeightMatrix& Weights(DType dtype, int64_t rows, int64_t cols) {
  static std::map<std::tuple<DType, int64_t, int64_t>, std::unique_ptr<BenchWeights>> cache;
  auto& slot = cache[{dtype, rows, cols}];
  if (!slot) {
    slot = std::make_unique<BenchWeights>();
    const int64_t row_bytes = DTypeRowBytes(dtype, cols);
    slot->bytes.resize(rows * row_bytes);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = dist(rng);
      QuantizeRow(dtype, row.data(), slot->bytes.data() + r * row_bytes, cols);
    }
    slot->w = WeightMatrix{dtype, slot->bytes.data(), rows, cols, row_bytes};
  }
  return slot->w;
}

std::vector<float> Input(int64_t num_tokens, int64_t cols) {
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(num_tokens * cols);
  for (auto& v : x) v = dist(rng);
  return x;
}

// range(0): dtype, range(1): rows, range(2): cols, range(3): tokens.
void BM_MatMul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), tokens = state.range(3);
  const RooflineBounds& bounds = Bounds();
  const WeightMatrix& w = Weights(dtype, rows, cols);
  const std::vector<float> x = Input(tokens, cols);
  std::vector<float> y(tokens * rows);
  MatMul(w, x.data(), tokens, y.data());  // warm-up
  for (auto _ : state) {
    MatMul(w, x.data(), tokens, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double n = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(rows) * w.row_bytes;
  const double flops = 2.0 * rows * cols * tokens;
  state.SetLabel(std::string(DTypeName(dtype)) + " " + std::string(MatMulIsaName()));
  if (tokens == 1) {
    state.counters["GB/s"] = benchmark::Counter(bytes * n / 1e9, benchmark::Counter::kIsRate);
    state.counters["bound_GB/s"] = bounds.read_gbs;
  } else {
    const bool quantized = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
    state.counters["GFLOP/s"] = benchmark::Counter(flops * n / 1e9, benchmark::Counter::kIsRate);
    state.counters["peak_GFLOP/s"] = quantized ? bounds.int8_gops : bounds.fma_gflops;
    state.counters["fma_peak"] = bounds.fma_gflops;
  }
}

void GemvArgs(benchmark::internal::Benchmark* b) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}}) {
      b->Args({static_cast<int64_t>(d), rows, cols, 1});
    }
  }
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}}) {
      b->Args({static_cast<int64_t>(d), rows, cols, 512});
    }
  }
}

BENCHMARK(BM_MatMul)->Name("MatMulGemv")->Apply(GemvArgs)->ArgNames({"dtype", "rows", "cols", "tokens"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatMul)->Name("MatMulGemm")->Apply(GemmArgs)->ArgNames({"dtype", "rows", "cols", "tokens"})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RooflineReadBandwidth(benchmark::State& state) {
  double v = 0;
  for (auto _ : state) v = MeasureReadBandwidthGBs();
  state.counters["GB/s"] = v;
}
void BM_RooflinePeakFma(benchmark::State& state) {
  double v = 0;
  for (auto _ : state) v = MeasurePeakFmaGflops();
  state.counters["GFLOP/s"] = v;
}
void BM_RooflinePeakBf16(benchmark::State& state) {
  double v = 0;
  for (auto _ : state) v = MeasurePeakBf16Gflops();
  state.counters["GFLOP/s"] = v;
}
void BM_RooflinePeakInt8(benchmark::State& state) {
  double v = 0;
  for (auto _ : state) v = MeasurePeakInt8Gops();
  state.counters["GOP/s"] = v;
}
BENCHMARK(BM_RooflineReadBandwidth)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RooflinePeakFma)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RooflinePeakBf16)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RooflinePeakInt8)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace pagoda
