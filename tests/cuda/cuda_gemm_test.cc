// The CUDA GEMMs (kernels/cuda/gemm.cu) through the backend's MatMul: against a float64
// reference on fresh random inputs, and batch invariance: a row's bits are the same whatever the
// number of rows, for every tile size and both ways of running the k chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "kernels/cuda/gemm.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagoda {
namespace {

using testing::DeviceArena;
using testing::Gpu;
using testing::RandomVector;
using testing::RelativeError;

float RoundBf16(float v) { return Bf16ToF32(F32ToBf16(v)); }

struct HostWeight {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
};

HostWeight MakeWeight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  HostWeight h;
  const auto values = RandomVector(rows * cols, seed);
  h.view.dtype = dtype;
  h.view.rows = rows;
  h.view.cols = cols;
  h.view.row_bytes = DTypeRowBytes(dtype, cols);
  h.bytes.resize(static_cast<size_t>(rows * h.view.row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(dtype, values.data() + r * cols, h.bytes.data() + r * h.view.row_bytes, cols);
  }
  h.view.data = h.bytes.data();
  return h;
}

// float64 y = x W^T from W's stored values and x rounded as the kernel rounds it.
std::vector<double> Reference(const WeightMatrix& w, const std::vector<float>& x, int64_t m, bool round_x) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<double> y(static_cast<size_t>(m * w.rows), 0.0);
  for (int64_t n = 0; n < w.rows; ++n) {
    DequantizeRow(w.dtype, w.row(n), row.data(), w.cols);
    for (int64_t i = 0; i < m; ++i) {
      double s = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const float xv = round_x ? RoundBf16(x[i * w.cols + k]) : x[i * w.cols + k];
        s += static_cast<double>(xv) * row[k];
      }
      y[i * w.rows + n] = s;
    }
  }
  return y;
}

double RelError(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

class CudaGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = Gpu();
    ASSERT_NE(gpu_, nullptr) << "no CUDA device (see above)";
    arena_ = std::make_unique<DeviceArena>(*gpu_);
  }
  CudaBackend* gpu_ = nullptr;
  std::unique_ptr<DeviceArena> arena_;
};

// Tolerances on ||gpu - ref|| / ||ref||, ref in float64:
//  - against the operands the tensor cores see (x rounded to bf16, W's bf16 values): only the
//    f32 accumulation differs, ~1e-7 for these k; 1e-5 allowed;
//  - against the unrounded x: x's rounding to bf16 (relative step 2^-9 per element) gives
//    ~1e-3 for random signs; 1e-2 allowed;
//  - f32 weights: f32 products and sums, 1e-5.
TEST_F(CudaGemmTest, MatchesFloat64Reference) {
  struct Shape {
    int64_t m, n, k;
  };
  // Odd m, n and k (k not a multiple of the 64-wide tile; k = 999: x rows not 16-byte aligned),
  // one-chunk and split-k weights, the three tile sizes (m <= 16, <= 64, larger).
  const Shape shapes[] = {{1, 45, 96},    {5, 200, 100},   {3, 90, 999},   {16, 64, 4096}, {17, 130, 1000},
                          {64, 256, 4096}, {65, 77, 2048}, {300, 300, 520}, {131, 1024, 4160},
                          {700, 256, 4096}};
  uint32_t seed = 100;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " k=" + std::to_string(s.k));
      const HostWeight w = MakeWeight(dtype, s.n, s.k, ++seed);
      const Weight wg = gpu_->PrepareWeight(w.view);
      const auto x = RandomVector(s.m * s.k, ++seed);
      const TensorView xg = arena_->Make(s.m, s.k, x), yg = arena_->Make(s.m, s.n);
      gpu_->MatMul(wg, xg, yg);
      const auto got = arena_->Read(yg);
      if (dtype == DType::kBF16) {
        EXPECT_LE(RelError(got, Reference(w.view, x, s.m, true)), 1e-5) << "against the bf16 operands";
        EXPECT_LE(RelError(got, Reference(w.view, x, s.m, false)), 1e-2) << "against the f32 activations";
      } else {
        EXPECT_LE(RelError(got, Reference(w.view, x, s.m, false)), 1e-5);
      }
      // kAddTo: out = base + x W^T.
      const auto base = RandomVector(s.m * s.n, ++seed);
      const TensorView out = arena_->Make(s.m, s.n, base), scratch = arena_->Make(s.m, s.n);
      gpu_->MatMul(wg, xg, scratch, {Epilogue::Kind::kAddTo, out});
      std::vector<double> want = Reference(w.view, x, s.m, dtype == DType::kBF16);
      for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
      EXPECT_LE(RelError(arena_->Read(out), want), 1e-5) << "kAddTo";
    }
  }
}

// The batch-invariance contract: row i of an m-row product has the same bits for every m.
TEST_F(CudaGemmTest, RowsHaveTheSameBitsWhateverTheBatch) {
  struct Shape {
    int64_t n, k;
  };
  // (256, 4096): 4 equal k chunks (up to 8 rows the GEMV kernel's warps, one a chunk, add them in
  // the block; up to 64 each tile's last block adds them, up to 1024 CUTLASS's split-K, beyond one
  // CUTLASS product per chunk, in slabs of 2048 rows); (2048, 512):
  // one chunk; (96, 1000): padded k; (200, 2999): x rows not 16-byte aligned (the 4-byte
  // copies), 4 chunks, the last shorter (one CUTLASS product per chunk); (130, 2048): rows of
  // 130 floats, not 16-byte aligned for TMA, so beyond 64 rows our own wgmma kernel and
  // ReduceChunks (4 chunks, slabs of kGemmPartialMaxRows).
  // (28672, 128), one chunk, and (13568, 2048), 2 chunks: wide enough for 64 x 128 wgmma tiles up
  // to 64 rows.
  const Shape shapes[] = {{256, 4096}, {2048, 512}, {96, 1000}, {200, 2999}, {130, 2048}, {28672, 128}, {13568, 2048}};
  // Up to 64 rows: mma.sync and wgmma m64n64 kernels; beyond: CUTLASS's 128 x 128 or 128 x 256
  // tiles (by the tile count), or ours.
  const int64_t ms[] = {1, 2, 15, 16, 17, 33, 63, 64, 65, 127, 128, 129, 299, 511, 512, 513, 1099, 2048, 2049};
  constexpr int64_t kRows = 2200;
  uint32_t seed = 500;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
      if (dtype == DType::kBF16 && s.n == 256) {
        EXPECT_GT(cuda::GemmSplitsFor(s.n, cuda::GemmPaddedK(s.k)).splits, 1) << "the shape meant to split k";
      }
      const HostWeight w = MakeWeight(dtype, s.n, s.k, ++seed);
      const Weight wg = gpu_->PrepareWeight(w.view);
      const auto x = RandomVector(kRows * s.k, ++seed, -2.0f, 2.0f);
      const auto base = RandomVector(kRows * s.n, ++seed);
      const TensorView xg = arena_->Make(kRows, s.k, x);
      const TensorView full = arena_->Make(kRows, s.n), full_add = arena_->Make(kRows, s.n, base);
      const TensorView scratch = arena_->Make(kRows, s.n);
      gpu_->MatMul(wg, xg, full);
      gpu_->MatMul(wg, xg, scratch, {Epilogue::Kind::kAddTo, full_add});
      const auto want = arena_->Read(full), want_add = arena_->Read(full_add);
      for (int64_t m : ms) {
        const TensorView y = arena_->Make(m, s.n), y_add = arena_->Make(m, s.n, base);
        gpu_->MatMul(wg, xg.RowRange(0, m), y);
        gpu_->MatMul(wg, xg.RowRange(0, m), scratch.RowRange(0, m), {Epilogue::Kind::kAddTo, y_add});
        const auto got = arena_->Read(y), got_add = arena_->Read(y_add);
        int64_t differ = 0, differ_add = 0;
        for (int64_t i = 0; i < m * s.n; ++i) {
          differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
          differ_add += std::memcmp(&got_add[i], &want_add[i], sizeof(float)) != 0;
        }
        EXPECT_EQ(differ, 0) << "m=" << m << ": values differ from the same rows of a " << kRows << "-row product";
        EXPECT_EQ(differ_add, 0) << "m=" << m << " (kAddTo)";
      }
    }
  }
}

// SwiGLU's gate|up product (StackOrder::kPairs16) with the kSiluMulPairs epilogue: up to 64 rows
// the GEMM writes silu(gate) * up itself (GemmFusesSilu), beyond it the paired SiLU kernel
// follows the product. A row's outputs have the same bits either way, whatever the batch, and
// stay within the bf16-operand tolerance of a float64 reference. n = 2080: 32.5 tiles of 64;
// n = 28672 (Llama-3-8B's gate|up): 64 x 128 tiles.
TEST_F(CudaGemmTest, FusedSiluGivesTheRowKernelBits) {
  constexpr int64_t kK = 520, kRows = 300;  // one k chunk
  for (const int64_t ffn : {1040, 14336}) {
    SCOPED_TRACE("ffn " + std::to_string(ffn));
    const HostWeight gate = MakeWeight(DType::kBF16, ffn, kK, 950), up = MakeWeight(DType::kBF16, ffn, kK, 951);
    const WeightMatrix parts[] = {gate.view, up.view};
    const Weight w = gpu_->PrepareStacked(parts, StackOrder::kPairs16);
    const auto x = RandomVector(kRows * kK, 952, -2.0f, 2.0f);
    const TensorView xg = arena_->Make(kRows, kK, x);
    auto run = [&](int64_t m) {
      const TensorView y = arena_->Make(m, 2 * ffn), out = arena_->Make(m, ffn);
      gpu_->MatMul(w, xg.RowRange(0, m), y, {Epilogue::Kind::kSiluMulPairs, out});
      return arena_->Read(out);
    };
    const auto want = run(kRows);  // beyond 64 rows: the product, then the paired SiLU kernel
    const auto g = Reference(gate.view, x, kRows, true), u = Reference(up.view, x, kRows, true);
    std::vector<double> ref(g.size());
    for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    EXPECT_LE(RelError(want, ref), 1e-5) << "against float64 silu(gate) * up of the bf16 operands";
    for (int64_t m : {1, 2, 7, 8, 9, 33, 64, 65}) {
      const auto got = run(m);
      int64_t differ = 0;
      for (int64_t i = 0; i < m * ffn; ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "m=" << m << ": silu(gate) * up differs from the same rows of a " << kRows << "-row step";
    }
  }
}

// The bf16 copy of a GEMM's input written by its producer (RMSNorm; the gate|up product's fused
// SiLU for the down product) gives the same bits as the GEMM's own conversion, at every row
// count that converts (9-64 rows and the larger products); an op between the producer and the
// GEMM that rewrites the input leaves the copy unused.
TEST_F(CudaGemmTest, ProducersBf16CopyGivesTheConvertedBits) {
  constexpr int64_t kDim = 256, kFfn = 1024, kRows = 130;
  const HostWeight qkv = MakeWeight(DType::kBF16, 384, kDim, 960), down = MakeWeight(DType::kBF16, kDim, kFfn, 961);
  const HostWeight gate = MakeWeight(DType::kBF16, kFfn, kDim, 962), up = MakeWeight(DType::kBF16, kFfn, kDim, 963);
  const Weight wq = gpu_->PrepareWeight(qkv.view), wd = gpu_->PrepareWeight(down.view);
  const WeightMatrix parts[] = {gate.view, up.view};
  const Weight wgu = gpu_->PrepareStacked(parts, StackOrder::kPairs16);
  const PreparedVector norm = gpu_->PrepareVector(RandomVector(kDim, 964, 0.5f, 1.5f));
  const auto x = RandomVector(kRows * kDim, 965, -2.0f, 2.0f);
  for (const int64_t m : std::initializer_list<int64_t>{9, 33, 64, 65, kRows}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const TensorView xg = arena_->Make(m, kDim, std::vector<float>(x.begin(), x.begin() + m * kDim));
    const TensorView h = arena_->Make(m, kDim), h2 = arena_->Make(m, kDim);
    // The norm, then the GEMM at once (its input's copy from the norm) ...
    const TensorView y1 = arena_->Make(m, 384), y2 = arena_->Make(m, 384);
    gpu_->RmsNorm(xg, norm.view, 1e-5, h);
    gpu_->MatMul(wq, h, y1);
    // ... against the GEMM over the same values elsewhere (it converts them itself).
    gpu_->Copy(h, h2);
    gpu_->MatMul(wq, h2, y2);
    const auto a = arena_->Read(y1), b = arena_->Read(y2);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "q|k|v after the norm";
    // The fused SiLU's copy for the down product.
    const TensorView gu = arena_->Make(m, 2 * kFfn), act = arena_->Make(m, kFfn), act2 = arena_->Make(m, kFfn);
    const TensorView d1 = arena_->Make(m, kDim), d2 = arena_->Make(m, kDim);
    gpu_->MatMul(wgu, h, gu, {Epilogue::Kind::kSiluMulPairs, act});
    gpu_->MatMul(wd, act, d1);
    gpu_->Copy(act, act2);
    gpu_->MatMul(wd, act2, d2);
    const auto c = arena_->Read(d1), d = arena_->Read(d2);
    EXPECT_EQ(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)), 0) << "down after the fused SiLU";
    // An op between the norm and the GEMM that rewrites the norm's output: the GEMM reads the
    // new values (x added to them), not the norm's copy.
    gpu_->RmsNorm(xg, norm.view, 1e-5, h);
    gpu_->Add(xg, h);
    gpu_->MatMul(wq, h, y1);
    gpu_->Copy(h, h2);
    gpu_->MatMul(wq, h2, y2);
    const auto e = arena_->Read(y1), f = arena_->Read(y2);
    EXPECT_EQ(std::memcmp(e.data(), f.data(), e.size() * sizeof(float)), 0) << "q|k|v after norm + add";
  }
}

// Stacked weights (q|k|v, gate|up 16 rows at a time) hold the parts' rows in the stack's order.
TEST_F(CudaGemmTest, StackedWeightsMatchTheirParts) {
  const HostWeight a = MakeWeight(DType::kBF16, 64, 200, 901), b = MakeWeight(DType::kBF16, 64, 200, 902);
  const HostWeight c = MakeWeight(DType::kBF16, 32, 200, 903);
  const auto x = RandomVector(9 * 200, 904);
  const TensorView xg = arena_->Make(9, 200, x);
  auto product = [&](const WeightMatrix& w) {
    const TensorView y = arena_->Make(9, w.rows);
    gpu_->MatMul(gpu_->PrepareWeight(w), xg, y);
    return arena_->Read(y);
  };
  const auto ya = product(a.view), yb = product(b.view), yc = product(c.view);
  {
    const WeightMatrix parts[] = {a.view, b.view, c.view};
    const TensorView y = arena_->Make(9, 160);
    gpu_->MatMul(gpu_->PrepareStacked(parts, StackOrder::kConcat), xg, y);
    const auto got = arena_->Read(y);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t j = 0; j < 160; ++j) {
        const float want = j < 64 ? ya[i * 64 + j] : j < 128 ? yb[i * 64 + j - 64] : yc[i * 32 + j - 128];
        ASSERT_EQ(got[i * 160 + j], want) << "kConcat row " << i << " col " << j;
      }
    }
  }
  {
    const WeightMatrix parts[] = {a.view, b.view};
    const TensorView y = arena_->Make(9, 128);
    gpu_->MatMul(gpu_->PrepareStacked(parts, StackOrder::kPairs16), xg, y);
    const auto got = arena_->Read(y);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t j = 0; j < 128; ++j) {
        const int64_t part = (j / 16) % 2, row = (j / 32) * 16 + j % 16;
        const float want = part == 0 ? ya[i * 64 + row] : yb[i * 64 + row];
        ASSERT_EQ(got[i * 128 + j], want) << "kPairs16 row " << i << " col " << j;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
