// MatMul against the float64 reference over a grid of shapes, token counts, weight
// dtypes and every ISA level this CPU supports; plus bit-exact batch and thread-count
// invariance.
//
// Tolerances (e = 2^-24, the f32 unit roundoff; S = sum_k |W[r,k] x[t,k]|, n = cols):
//  * F32/F16/BF16 weights: weights are widened exactly and every product is exact
//    inside an FMA, so the only error is the f32 summation: each of V lanes adds
//    n/V terms in sequence, then a log2(V)-deep tree. The classic bound for a sum of
//    m terms, (m - 1) e S, gives |y - ref| <= (ceil(n/8) + 8) e S for V in {8, 16}.
//  * Q8_0/Q4_0 weights: activations are quantized per 32-block to d*q with
//    |x - d*q| <= d/2 (d = max|x_block| / 127), which moves the result by at most
//    A = sum_k |W[r,k]| d_block(k) / 2 (times 1.001 for the rounding of x/d). The
//    integer block dots are exact; the f32 work adds one rounding for d_w*d_x, one
//    per FMA and the lane sums: (n/32 + 8) * 2e * (S + A). Total: A*1.001 + that.
//    Relative to S this is ~1e-2 worst case for Gaussian data (typically ~1e-3),
//    the price of int8 activations that llama.cpp also pays.
//  * Packed weights (packed_weights.h) are tested the same way at every level (the
//    level's own panel shape, or the portable kernel's): each output is then ONE
//    sequential sum over k, so the float bound is (n + 8) e S.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/ref/matmul_ref.h"

namespace pagoda {
namespace {

using matmul_internal::IsaLevel;
using matmul_internal::IsaLevelName;
using matmul_internal::IsaLevelSupported;
using matmul_internal::MatMulAt;

constexpr double kEps = 1.0 / (1 << 24);

// A random weight matrix stored in `dtype`, plus the storage it views.
struct TestWeights {
  std::vector<uint8_t> bytes;
  CpuWeight w;
  std::shared_ptr<const PackedWeights> packed;
};

// The panel rows `level`'s packed kernel takes (avx512: 32; avx2: 16 float rows, 32 q8 rows;
// generic: 32 float rows, 16 q8 rows, so the portable kernel also runs the one-group block
// layout), and the level they are shaped for.
int64_t PanelRows(IsaLevel level, DType dtype) {
  const bool q8 = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
  if (level == IsaLevel::kAvx2) return q8 ? 32 : 16;
  return level == IsaLevel::kGeneric && q8 ? 16 : 32;
}
IsaLevel ShapedFor(IsaLevel level, DType) { return level; }
void Pack(IsaLevel level, TestWeights* t) {
  t->packed = PackWeights(t->w, PanelRows(level, t->w.dtype), static_cast<int>(ShapedFor(level, t->w.dtype)));
  t->w.packed = t->packed.get();
}

TestWeights MakeWeights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  TestWeights t;
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  t.bytes.resize(rows * row_bytes + 1);  // +1: rows need not be aligned
  uint8_t* base = t.bytes.data() + 1;
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(dtype, row.data(), base + r * row_bytes, cols);
  }
  t.w = CpuWeight(WeightMatrix{dtype, base, rows, cols, row_bytes});
  return t;
}

std::vector<float> MakeInput(int64_t num_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(num_tokens * cols);
  for (auto& v : x) v = dist(rng);
  return x;
}

bool IsQuantized(DType d) { return d == DType::kQ8_0 || d == DType::kQ4_0; }

// The error bound of the file comment for output (t, r).
double Bound(const CpuWeight& w, const float* x, double abs_ref, int64_t t, int64_t r) {
  const int64_t n = w.cols;
  if (!IsQuantized(w.dtype)) {
    return ((w.packed != nullptr ? n : std::ceil(n / 8.0)) + 8) * kEps * abs_ref;
  }
  std::vector<float> row(n);
  DequantizeRow(w.dtype, w.row(r), row.data(), n);
  double act = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    double amax = 0, wsum = 0;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[t * n + b * 32 + i])));
      wsum += std::fabs(static_cast<double>(row[b * 32 + i]));
    }
    act += wsum * amax / 127.0 / 2.0;
  }
  return act * 1.001 + (n / 32.0 + 8) * 2 * kEps * (abs_ref + act);
}

std::string Name(IsaLevel level, DType dtype, bool packed = false) {
  return std::string(IsaLevelName(level)) + "_" + std::string(DTypeName(dtype)) +
         (packed ? "_packed" : "");
}

class MatMulTest : public ::testing::TestWithParam<std::tuple<IsaLevel, DType, bool>> {
 protected:
  void SetUp() override {
    level_ = std::get<0>(GetParam());
    dtype_ = std::get<1>(GetParam());
    packed_ = std::get<2>(GetParam());
    ASSERT_TRUE(IsaLevelSupported(level_));  // only supported levels are instantiated
  }
  void TearDown() override { SetNumThreads(saved_threads_); }

  TestWeights Make(int64_t rows, int64_t cols, uint32_t seed) const {
    TestWeights t = MakeWeights(dtype_, rows, cols, seed);
    if (packed_) Pack(level_, &t);
    return t;
  }

  IsaLevel level_;
  DType dtype_;
  bool packed_ = false;
  int saved_threads_ = NumThreads();
};

TEST_P(MatMulTest, MatchesFloat64ReferenceOnGrid) {
  std::vector<int64_t> cols_list = {32, 96, 4096 + 32};
  if (!IsQuantized(dtype_)) {
    cols_list.push_back(13);   // partial vector only
    cols_list.push_back(100);  // full vectors + a partial one
    cols_list.push_back(300);  // GEMM k-slices (256) + a partial vector
  }
  uint32_t seed = 1;
  double worst_ratio = 0;  // max |y - ref| / S, for the log
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t cols : cols_list) {
      for (int64_t num_tokens : {1, 3, 17, 64}) {
        TestWeights tw = Make(rows, cols, seed++);
        std::vector<float> x = MakeInput(num_tokens, cols, seed++);
        std::vector<float> y(num_tokens * rows, -1.0f);
        std::vector<double> ref(num_tokens * rows), abs_ref(num_tokens * rows);
        MatMulAt(level_, tw.w, x.data(), num_tokens, y.data());
        MatMulRef(tw.w, x.data(), num_tokens, ref.data(), abs_ref.data());
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = t * rows + r;
            const double err = std::fabs(y[i] - ref[i]);
            const double bound = Bound(tw.w, x.data(), abs_ref[i], t, r);
            worst_ratio = std::max(worst_ratio, err / abs_ref[i]);
            ASSERT_LE(err, bound) << "rows=" << rows << " cols=" << cols
                                  << " num_tokens=" << num_tokens << " t=" << t << " r=" << r
                                  << " y=" << y[i] << " ref=" << ref[i] << " S=" << abs_ref[i];
          }
        }
      }
    }
  }
  RecordProperty("worst_error_over_abs_sum", std::to_string(worst_ratio));
  std::printf("[ %s ] worst |y - ref| / sum|w x| = %.3g\n", Name(level_, dtype_, packed_).c_str(),
              worst_ratio);
}

// Every token's row equals the one computed alone (num_tokens = 1), bit for bit,
// wherever it sits in a batch.
TEST_P(MatMulTest, BatchInvariantBitExact) {
  for (int64_t cols : {96, 4096 + 32}) {
    const int64_t rows = 37;
    const int64_t num_tokens = 64;
    TestWeights tw = Make(rows, cols, 11);
    std::vector<float> x = MakeInput(num_tokens, cols, 12);
    std::vector<float> single(num_tokens * rows);
    for (int64_t t = 0; t < num_tokens; ++t) {
      MatMulAt(level_, tw.w, x.data() + t * cols, 1, single.data() + t * rows);
    }
    for (int64_t batch : {2, 3, 5, 17, 64}) {
      for (int64_t t0 = 0; t0 + batch <= num_tokens; t0 += batch) {
        std::vector<float> y(batch * rows);
        MatMulAt(level_, tw.w, x.data() + t0 * cols, batch, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), single.data() + t0 * rows, y.size() * sizeof(float)))
            << "cols=" << cols << " batch=" << batch << " t0=" << t0;
      }
    }
  }
}

// Results do not depend on how rows are split over 1, 2 or 3 threads.
TEST_P(MatMulTest, ThreadCountInvariantBitExact) {
  const int64_t rows = 515, cols = 4096 + 32;
  TestWeights tw = Make(rows, cols, 21);
  for (int64_t num_tokens : {1, 5}) {
    std::vector<float> x = MakeInput(num_tokens, cols, 22);
    std::vector<float> expected;
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      std::vector<float> y(num_tokens * rows);
      MatMulAt(level_, tw.w, x.data(), num_tokens, y.data());
      if (expected.empty()) {
        expected = y;
      } else {
        ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
            << "threads=" << threads << " num_tokens=" << num_tokens;
      }
    }
  }
}

TEST_P(MatMulTest, ZeroInputGivesZero) {
  TestWeights tw = Make(9, 64, 31);
  std::vector<float> x(3 * 64, 0.0f), y(3 * 9, 1.0f);
  MatMulAt(level_, tw.w, x.data(), 3, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// The fused residual add gives the bits of MatMul followed by AddInPlace, for a GEMV and
// GEMMs of several sizes (work items split by rows and by tokens), rows not a multiple of the
// panel (the padded last panel) included.
TEST_P(MatMulTest, FusedResidualAddIsTheSeparateAdd) {
  for (int64_t rows : {37, 96, 300}) {
    const int64_t cols = 96;
    TestWeights tw = Make(rows, cols, 41);
    for (int64_t num_tokens : {1, 7, 64, 130}) {
      std::vector<float> x = MakeInput(num_tokens, cols, 42);
      const std::vector<float> residual = MakeInput(num_tokens, rows, 43);
      std::vector<float> y(num_tokens * rows), want = residual, got = residual, scratch(num_tokens * rows);
      MatMulAt(level_, tw.w, x.data(), num_tokens, y.data());
      AddInPlace(y.data(), num_tokens * rows, want.data());
      const MatMulEpilogue ep{MatMulEpilogue::Kind::kAddTo, got.data()};
      MatMulAt(level_, tw.w, x.data(), num_tokens, scratch.data(), &ep);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << "rows=" << rows << " num_tokens=" << num_tokens;
    }
  }
}

// The levels this CPU runs: a level the CPU lacks is not instantiated (CI must not skip).
// AVX-512 runs where the CPU has it (the device host's CPU does; see docs/benchmarks.md).
std::vector<IsaLevel> SupportedLevels() {
  std::vector<IsaLevel> levels;
  for (IsaLevel l : {IsaLevel::kGeneric, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (IsaLevelSupported(l)) levels.push_back(l);
  }
  return levels;
}

// Gate and up stacked 16 rows at a time (StackOrder::kPairs16), with the fused silu(gate) * up:
// the bits of the two matrices packed alone, multiplied apart, then SiluMul, at every level and
// weight dtype (the pairs exist only as packed panels).
TEST(MatMulFusedTest, SiluMulOfPairedGateUpIsTheSeparateKernels) {
  const int64_t ffn = 80, cols = 64;  // 5 groups of 16: the last 32-row panel mixes pairs
  for (IsaLevel level : SupportedLevels()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      TestWeights gate = MakeWeights(dtype, ffn, cols, 51), up = MakeWeights(dtype, ffn, cols, 52);
      Pack(level, &gate);
      Pack(level, &up);
      const auto stacked = PackStackedWeights({gate.w, up.w}, PanelRows(level, dtype),
                                              static_cast<int>(ShapedFor(level, dtype)), StackOrder::kPairs16);
      ASSERT_TRUE(stacked->pairs16);
      const CpuWeight fused = PackedOnlyView(*stacked);
      for (int64_t num_tokens : {1, 5, 64}) {
        std::vector<float> x = MakeInput(num_tokens, cols, 53);
        std::vector<float> g(num_tokens * ffn), u(num_tokens * ffn), want(num_tokens * ffn);
        MatMulAt(level, gate.w, x.data(), num_tokens, g.data());
        MatMulAt(level, up.w, x.data(), num_tokens, u.data());
        SiluMul(g.data(), u.data(), num_tokens * ffn, want.data());
        std::vector<float> got(num_tokens * ffn, -1.0f), scratch(num_tokens * 2 * ffn);
        const MatMulEpilogue ep{MatMulEpilogue::Kind::kSiluMulPairs, got.data()};
        MatMulAt(level, fused, x.data(), num_tokens, scratch.data(), &ep);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << Name(level, dtype, true) << " num_tokens=" << num_tokens;
      }
    }
  }
}

// The quantized panels of the AVX2 and AVX-512 levels compute, per output, exactly
// acc = fma(float(isum_b), dw_b * dx_b, acc) over the blocks b in order (isum_b the exact integer
// dot of the codes): the same bits at both levels, whatever the token count or k slicing.
TEST(MatMulPackedTest, QuantizedPanelsAreTheFusedBlockSumExactly) {
  const int64_t rows = 80, cols = 32 * 40;  // a padded last panel; more blocks than one k slice
  for (IsaLevel level : SupportedLevels()) {
    if (level == IsaLevel::kGeneric) continue;  // its own order (no fma), tested against the reference
    for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
      TestWeights tw = MakeWeights(dtype, rows, cols, 61);
      // A code of -128 (valid in a Q8_0 file, though ggml's quantizer stops at -127): |q| = 128
      // in the AVX2 sign trick.
      if (dtype == DType::kQ8_0) const_cast<uint8_t*>(tw.w.row(3))[2 + 5] = 0x80;
      Pack(level, &tw);
      for (int64_t num_tokens : {1, 3, 9}) {
        std::vector<float> x = MakeInput(num_tokens, cols, 62);
        matmul_internal::QuantizedActivations xq;
        matmul_internal::QuantizeActivations(x.data(), num_tokens, cols, false, &xq);
        std::vector<float> got(num_tokens * rows);
        MatMulAt(level, tw.w, x.data(), num_tokens, got.data());
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = tw.w.row(r);
            const int64_t block_bytes = dtype == DType::kQ8_0 ? 34 : 18;
            float acc = 0.0f;
            for (int64_t b = 0; b < cols / 32; ++b) {
              const uint8_t* blk = row + b * block_bytes;
              uint16_t dw;
              std::memcpy(&dw, blk, 2);
              int32_t isum = 0;
              for (int i = 0; i < 32; ++i) {
                const int32_t wq = dtype == DType::kQ8_0 ? static_cast<int8_t>(blk[2 + i])
                                                         : ((i < 16 ? blk[2 + i] & 0x0f : blk[2 + i - 16] >> 4) - 8);
                isum += wq * xq.q_row(t)[b * 32 + i];
              }
              acc = std::fma(static_cast<float>(isum), F16ToF32(dw) * xq.d_row(t)[b], acc);
            }
            ASSERT_EQ(acc, got[t * rows + r]) << Name(level, dtype, true) << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLevels, MatMulTest,
    ::testing::Combine(::testing::ValuesIn(SupportedLevels()),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                         DType::kQ4_0),
                       ::testing::Values(false)),
    [](const ::testing::TestParamInfo<MatMulTest::ParamType>& info) {
      return Name(std::get<0>(info.param), std::get<1>(info.param));
    });

INSTANTIATE_TEST_SUITE_P(
    Packed, MatMulTest,
    ::testing::Combine(::testing::ValuesIn(SupportedLevels()),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                         DType::kQ4_0),
                       ::testing::Values(true)),
    [](const ::testing::TestParamInfo<MatMulTest::ParamType>& info) {
      return Name(std::get<0>(info.param), std::get<1>(info.param), true);
    });

// kPairs16 stacking: row 32i + j of the stack is gate row 16i + j, row 32i + 16 + j up row 16i + j.
TEST(PackedWeightsTest, Pairs16StackAlternatesTheTwoParts) {
  const int64_t ffn = 48, cols = 32;
  TestWeights gate = MakeWeights(DType::kF32, ffn, cols, 61), up = MakeWeights(DType::kF32, ffn, cols, 62);
  const auto pw = PackStackedWeights({gate.w, up.w}, 32, 0, StackOrder::kPairs16);
  ASSERT_EQ(pw->rows, 2 * ffn);
  for (int64_t r = 0; r < 2 * ffn; ++r) {
    const TestWeights& part = (r / 16) % 2 == 0 ? gate : up;
    const int64_t src = r / 32 * 16 + r % 16;
    for (int64_t k = 0; k < cols; ++k) {
      float got;
      std::memcpy(&got, pw->panel(r / 32) + (k * 32 + r % 32) * 4, 4);
      float want;
      std::memcpy(&want, part.w.row(src) + k * 4, 4);
      ASSERT_EQ(got, want) << "r=" << r << " k=" << k;
    }
  }
  // Parts that cannot alternate are not stacked that way.
  TestWeights odd = MakeWeights(DType::kF32, 40, cols, 63);
  EXPECT_EQ(PackStackedForCpu({odd.w, odd.w}, StackOrder::kPairs16), nullptr);
}

// The panels carry every weight exactly: unpacking a panel gives the rows back.
TEST(PackedWeightsTest, PanelsHoldTheRowsExactly) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t panel_rows : {16, 32}) {
      const int64_t rows = 37, cols = 64;
      TestWeights tw = MakeWeights(dtype, rows, cols, 5);
      auto pw = PackWeights(tw.w, panel_rows, 0);
      ASSERT_EQ(pw->num_panels, (rows + panel_rows - 1) / panel_rows);
      for (int64_t r = 0; r < pw->num_panels * panel_rows; ++r) {
        const int64_t p = r / panel_rows, j = r % panel_rows;
        for (int64_t k = 0; k < cols; ++k) {
          float got = 0, want = 0;
          // Quantized: block k / 32 of the panel, row j in lane j % 16 of group j / 16.
          const uint8_t* group = dtype == DType::kQ8_0 || dtype == DType::kQ4_0
                                     ? pw->q_block(p, k / 32) + (j / 16) * 16 * pw->block_code_bytes()
                                     : nullptr;
          if (dtype == DType::kQ8_0) {
            const uint8_t code = group[((k % 32) / 4 * 16 + j % 16) * 4 + k % 4];
            got = F16ToF32(pw->q_block_scales(p, k / 32)[j]) * (static_cast<int>(code) - 128);
          } else if (dtype == DType::kQ4_0) {
            const int64_t kb = k % 32, byte = kb % 16;  // ggml: byte i holds k = i and i + 16
            const uint8_t b = group[(byte / 4 * 16 + j % 16) * 4 + byte % 4];
            const int nibble = kb < 16 ? (b & 0x0f) : (b >> 4);
            got = F16ToF32(pw->q_block_scales(p, k / 32)[j]) * (nibble - 8);
          } else {
            const int64_t half = panel_rows / 2;
            const int64_t slot = dtype == DType::kBF16 ? (j < half ? 2 * j : 2 * (j - half) + 1) : j;
            const uint8_t* e = pw->panel(p) + (k * panel_rows + slot) * (dtype == DType::kF32 ? 4 : 2);
            std::vector<float> one(1);
            DequantizeRow(dtype, e, one.data(), 1);
            got = one[0];
          }
          if (r < rows) {
            std::vector<float> row(cols);
            DequantizeRow(dtype, tw.w.row(r), row.data(), cols);
            want = row[k];
          }
          ASSERT_EQ(got, want) << DTypeName(dtype) << " panel_rows=" << panel_rows << " r=" << r << " k=" << k;
        }
      }
    }
  }
}

// A view whose data or shape differs from what was packed ignores the panels.
TEST(PackedWeightsTest, MismatchedViewFallsBackToRows) {
  TestWeights tw = MakeWeights(DType::kBF16, 40, 64, 6);
  auto pw = PackWeights(tw.w, 32, 0);
  CpuWeight first = tw.w;
  first.rows = 8;  // a sub-view of the first 8 rows, packed pointer left behind
  first.packed = pw.get();
  std::vector<float> x = MakeInput(1, 64, 7), y(8), want(8);
  MatMul(first, x.data(), 1, y.data());
  first.packed = nullptr;
  MatMul(first, x.data(), 1, want.data());
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * 8));
}

TEST(MatMulDispatchTest, DefaultIsTheBestSupportedLevel) {
  std::printf("CPU features: %s; MatMul uses %s\n", GetCpuFeatures().ToString().c_str(),
              std::string(MatMulIsaName()).c_str());
  if (std::getenv("PAGODA_MATMUL_ISA") == nullptr) {
    EXPECT_EQ(MatMulIsaName(), IsaLevelName(matmul_internal::BestIsaLevel()));
  }
  EXPECT_TRUE(IsaLevelSupported(IsaLevel::kGeneric));
}

TEST(MatMulDispatchTest, RejectsUnsupportedWeights) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> x(256), y(4);
  WeightMatrix ints{DType::kI32, bytes.data(), 1, 256, 1024};
  EXPECT_THROW(MatMul(ints, x.data(), 1, y.data()), Error);
  WeightMatrix ragged{DType::kQ8_0, bytes.data(), 1, 48, 34};
  EXPECT_THROW(MatMul(ragged, x.data(), 1, y.data()), Error);
}

// K-quants run through the portable path: random super-blocks (finite fp16 scales)
// against the reference, and bit-exact batch invariance.
TEST(MatMulKQuantTest, MatchesReferenceAndIsBatchInvariant) {
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t rows = 5, cols = 512, num_tokens = 7;
    const int64_t block_bytes = DTypeBlockBytes(dtype), row_bytes = DTypeRowBytes(dtype, cols);
    std::mt19937 rng(41);
    std::vector<uint8_t> bytes(rows * row_bytes);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t blk = 0; blk < rows * cols / 256; ++blk) {
      uint8_t* p = bytes.data() + blk * block_bytes;
      const uint16_t d = F32ToF16(0.01f), dmin = F32ToF16(0.002f);
      if (dtype == DType::kQ6_K) {
        std::memcpy(p + 208, &d, 2);
      } else {
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &dmin, 2);
      }
    }
    WeightMatrix w{dtype, bytes.data(), rows, cols, row_bytes};
    std::vector<float> x = MakeInput(num_tokens, cols, 42);
    std::vector<float> y(num_tokens * rows), one(rows);
    std::vector<double> ref(num_tokens * rows), abs_ref(num_tokens * rows);
    MatMul(w, x.data(), num_tokens, y.data());
    MatMulRef(w, x.data(), num_tokens, ref.data(), abs_ref.data());
    for (int64_t i = 0; i < num_tokens * rows; ++i) {
      ASSERT_LE(std::fabs(y[i] - ref[i]), (cols / 8.0 + 8) * kEps * abs_ref[i]) << DTypeName(dtype);
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
      MatMul(w, x.data() + t * cols, 1, one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), y.data() + t * rows, rows * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace pagoda
