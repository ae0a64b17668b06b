// The attention tile step (attention_tile.h) at every ISA level this CPU supports: its vector
// exp against std::exp, and the paged and MLA kernels built on it against the float64
// references over head dims with and without a vector tail, GQA groups, KV formats and
// contexts crossing tile and split boundaries, bit-identical whatever the batch and the
// thread count; and the SIMD levels agreeing bit for bit (AVX2 == AVX-512 where both run).
#include "kernels/cpu/attention_tile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/attention.h"
#include "kv/kv_codec.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/mla_attention_ref.h"

namespace pagoda {
namespace {

using matmul_internal::IsaLevel;

std::string LevelName(const ::testing::TestParamInfo<IsaLevel>& info) {
  return std::string(matmul_internal::IsaLevelName(info.param));
}

// ---- exp ---------------------------------------------------------------------------------

// Distance in units in the last place of `want` (rounded to f32).
double UlpError(float got, double want) {
  const float w = static_cast<float>(want);
  const float ulp = std::nextafter(w, std::numeric_limits<float>::infinity()) - w;
  return std::fabs(got - want) / ulp;
}

class AttentionTileExpTest : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(AttentionTileExpTest, MatchesStdExpOverADenseRange) {
  const auto kernels = cpu::AttentionTileAt(GetParam());
  std::vector<float> x;
  for (double v = -104.0; v <= 88.7; v += 1.0 / 512) x.push_back(static_cast<float>(v));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-90.0f, 88.7f);
  for (int i = 0; i < 100000; ++i) x.push_back(uniform(rng));
  for (float v = -1e-3f; v <= 1e-3f; v += 1e-6f) x.push_back(v);  // around 0
  x.push_back(-87.33654f);  // ln FLT_MIN
  x.push_back(88.0f);
  x.push_back(88.72283f);  // just below ln FLT_MAX
  std::vector<float> y(x.size());
  kernels.exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  const double min_arg = std::log(static_cast<double>(std::numeric_limits<float>::min()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < min_arg) {
      ASSERT_EQ(y[i], 0.0f) << "exp(" << x[i] << "): below FLT_MIN flushes to 0";
      continue;
    }
    const double want = std::exp(static_cast<double>(x[i]));
    const double err = UlpError(y[i], want);
    worst = std::max(worst, err);
    ASSERT_LE(err, 2.0) << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
    // And against the library's f32 exp (itself within an ulp).
    ASSERT_NEAR(y[i], std::exp(x[i]), 3 * std::fabs(std::exp(x[i])) * 1.2e-7) << x[i];
  }
  RecordProperty("max_ulp_error", std::to_string(worst));
}

TEST_P(AttentionTileExpTest, SpecialValues) {
  const auto kernels = cpu::AttentionTileAt(GetParam());
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // An odd count: the last values go through the partial vector too.
  const std::vector<float> x = {-inf, -1e30f, -1000.0f, -104.0f, -88.0f, -87.4f, 0.0f, -0.0f,
                                1.0f, -1.0f, 88.0f, 88.73f, 100.0f, inf, nan, -inf, 0.0f};
  std::vector<float> y(x.size());
  kernels.exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (int i : {0, 1, 2, 3, 4, 5, 15}) EXPECT_EQ(y[i], 0.0f) << "exp(" << x[i] << ")";
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_EQ(y[7], 1.0f);
  EXPECT_EQ(y[16], 1.0f);
  EXPECT_LE(UlpError(y[8], std::exp(1.0)), 2.0);
  EXPECT_LE(UlpError(y[9], std::exp(-1.0)), 2.0);
  EXPECT_LE(UlpError(y[10], std::exp(88.0)), 2.0);
  for (int i : {11, 12, 13}) EXPECT_EQ(y[i], inf) << "exp(" << x[i] << ")";
  EXPECT_TRUE(std::isnan(y[14]));
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionTileExpTest,
                         ::testing::ValuesIn(cpu::SupportedAttentionIsas()), LevelName);

// ---- paged attention ---------------------------------------------------------------------

struct PagedCase {
  int64_t head_dim, group;
  DType kv_dtype;
  KVQuant quant = KVQuant::kNone;
};

std::string CaseName(const PagedCase& c) {
  return "d" + std::to_string(c.head_dim) + "_g" + std::to_string(c.group) + "_" +
         std::string(DTypeName(c.kv_dtype)) + (c.quant == KVQuant::kInt8 ? "_int8" : "");
}

// One sequence of kLen tokens in scrambled blocks of 16; queries at positions on both sides
// of tile (64) and split (512) boundaries.
constexpr int64_t kLen = 1100;
const std::vector<int32_t> kPositions = {0, 1, 62, 63, 64, 65, 130, 511, 512, 513, 700, 1099};

struct PagedFixture {
  std::vector<float> q;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> table, positions = kPositions;
  std::vector<const int32_t*> tables;
  PagedAttentionParams p;

  PagedFixture(const PagedCase& c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t bs = 16, kvh = 2, d = c.head_dim, heads = kvh * c.group;
    const int64_t num_blocks = kLen / bs + 2;
    table.resize(num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const int64_t elems = num_blocks * bs * kvh * d;
    KVArrayFormat f;
    f.quant = c.quant;
    f.block_size = bs;
    f.num_heads = kvh;
    f.head_dim = d;
    for (auto* buf : {&k, &v}) {
      std::vector<float> x(elems);
      for (float& e : x) e = normal(rng);
      x[rng() % elems] = 20.0f;  // an outlier
      if (c.quant == KVQuant::kNone) {
        buf->resize(elems * DTypeBlockBytes(c.kv_dtype));
        QuantizeRow(c.kv_dtype, x.data(), buf->data(), elems);
      } else {
        const int64_t per_block = bs * kvh * d;
        buf->assign(num_blocks * KVBlockBytes(f), 0);
        for (int64_t b = 0; b < num_blocks; ++b) {
          QuantizeKVBlock(f, x.data() + b * per_block, buf->data() + b * KVBlockBytes(f));
        }
      }
    }
    const int64_t nq = static_cast<int64_t>(positions.size());
    q.resize(nq * heads * d);
    for (float& e : q) e = normal(rng);
    tables.assign(nq, table.data());
    p.q = q.data();
    p.num_tokens = nq;
    p.num_heads = heads;
    p.num_kv_heads = kvh;
    p.head_dim = d;
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.kv_dtype = c.kv_dtype;
    p.block_size = bs;
    p.positions = positions.data();
    p.block_tables = tables.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    if (c.quant != KVQuant::kNone) p.k_format = p.v_format = f;
  }

  int64_t Row() const { return p.num_heads * p.head_dim; }
};

class AttentionTilePagedTest
    : public ::testing::TestWithParam<std::tuple<IsaLevel, PagedCase>> {};

TEST_P(AttentionTilePagedTest, MatchesFloat64ReferenceWhateverTheBatchAndThreads) {
  const auto [level, c] = GetParam();
  PagedFixture f(c, 100 + c.head_dim * 10 + c.group);
  const int64_t nq = f.p.num_tokens, row = f.Row();
  std::vector<float> ref(nq * row), out(nq * row, NAN);
  PagedAttentionParams r = f.p;
  r.out = ref.data();
  ref::PagedAttention(r);
  SetNumThreads(2);
  PagedAttentionParams all = f.p;
  all.out = out.data();
  PagedAttentionAt(level, all);
  // f32 arithmetic over up to 1100 keys; outputs are convex combinations of V rows (|V| <= 20).
  for (int64_t i = 0; i < nq * row; ++i) {
    ASSERT_NEAR(out[i], ref[i], 2e-5 * 20) << "token " << i / row << " (position "
                                            << f.positions[i / row] << ") value " << i % row;
  }
  // Each token alone, on 1 and 3 threads: the same bits.
  for (int threads : {1, 3}) {
    SetNumThreads(threads);
    for (int64_t t = 0; t < nq; ++t) {
      std::vector<float> one(row, NAN);
      PagedAttentionParams single = f.p;
      single.num_tokens = 1;
      single.q = f.q.data() + t * row;
      single.positions = f.positions.data() + t;
      single.block_tables = f.tables.data() + t;
      single.out = one.data();
      PagedAttentionAt(level, single);
      ASSERT_EQ(0, std::memcmp(one.data(), out.data() + t * row, row * sizeof(float)))
          << "token " << t << " alone on " << threads << " threads";
    }
  }
  SetNumThreads(2);
}

std::vector<PagedCase> PagedCases() {
  std::vector<PagedCase> cases;
  // 64 / 128: the common head dims; 96, 80: multiples of 16 but not of 64; 72: a tail for
  // 16-lane vectors; 36: a tail for 8-lane vectors too.
  for (int64_t d : {64, 128, 96, 80, 72, 36}) {
    for (int64_t g : {1, 4, 8}) {
      for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
        if (d != 64 && g == 8 && t != DType::kBF16) continue;  // keep it quick
        cases.push_back({d, g, t});
      }
    }
  }
  for (int64_t d : {64, 80}) cases.push_back({d, 4, DType::kF32, KVQuant::kInt8});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Levels, AttentionTilePagedTest,
    ::testing::Combine(::testing::ValuesIn(cpu::SupportedAttentionIsas()),
                       ::testing::ValuesIn(PagedCases())),
    [](const auto& info) {
      return std::string(matmul_internal::IsaLevelName(std::get<0>(info.param))) + "_" +
             CaseName(std::get<1>(info.param));
    });

// ---- MLA ---------------------------------------------------------------------------------

MlaAttentionParams MlaParams(int64_t rank, int64_t rope, int64_t heads, const std::vector<uint16_t>& lat,
                             const std::vector<uint16_t>& pe, const std::vector<float>& q,
                             const int32_t* positions, const int32_t* const* tables, int64_t nq,
                             float* out) {
  MlaAttentionParams p;
  p.q = q.data();
  p.out = out;
  p.num_tokens = nq;
  p.num_heads = heads;
  p.kv_lora_rank = rank;
  p.rope_dim = rope;
  p.latent_cache = lat.data();
  p.rope_cache = pe.data();
  p.kv_dtype = DType::kBF16;
  p.block_size = 16;
  p.positions = positions;
  p.block_tables = tables;
  p.scale = 1.0f / std::sqrt(static_cast<float>(rank + rope));
  return p;
}

class AttentionTileMlaTest : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(AttentionTileMlaTest, MatchesFloat64ReferenceWhateverTheBatch) {
  const IsaLevel level = GetParam();
  for (auto [rank, rope, heads] : {std::tuple<int64_t, int64_t, int64_t>{512, 64, 20}, {72, 8, 3}}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int64_t len = 300, bs = 16, nb = len / bs + 1;
    std::mt19937_64 rng(rank);
    std::normal_distribution<float> normal;
    std::vector<int32_t> table(nb);
    std::iota(table.rbegin(), table.rend(), 0);
    std::vector<uint16_t> lat(nb * bs * rank), pe(nb * bs * rope);
    for (auto& e : lat) e = F32ToBf16(normal(rng));
    for (auto& e : pe) e = F32ToBf16(normal(rng));
    const std::vector<int32_t> positions = {0, 63, 64, 200, 299};
    const int64_t nq = static_cast<int64_t>(positions.size());
    std::vector<const int32_t*> tables(nq, table.data());
    std::vector<float> q(nq * heads * (rank + rope));
    for (float& e : q) e = normal(rng);
    const int64_t row = heads * rank;
    std::vector<float> out(nq * row, NAN), ref(nq * row);
    ref::MlaAttention(MlaParams(rank, rope, heads, lat, pe, q, positions.data(), tables.data(), nq,
                                ref.data()));
    MlaAttentionAt(level, MlaParams(rank, rope, heads, lat, pe, q, positions.data(), tables.data(),
                                    nq, out.data()));
    for (int64_t i = 0; i < nq * row; ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << i;
    for (int64_t t = 0; t < nq; ++t) {
      std::vector<float> one(row, NAN);
      std::vector<float> qt(q.begin() + t * heads * (rank + rope), q.begin() + (t + 1) * heads * (rank + rope));
      MlaAttentionAt(level, MlaParams(rank, rope, heads, lat, pe, qt, positions.data() + t,
                                      tables.data() + t, 1, one.data()));
      ASSERT_EQ(0, std::memcmp(one.data(), out.data() + t * row, row * sizeof(float))) << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionTileMlaTest,
                         ::testing::ValuesIn(cpu::SupportedAttentionIsas()), LevelName);

// ---- the SIMD levels agree ---------------------------------------------------------------

// AVX2 (8 lanes) and AVX-512 (16 lanes) run the same per-lane arithmetic (attention_tile.h):
// every level from AVX2 up gives AVX2's bits.
TEST(AttentionTileTest, SimdLevelsGiveTheSameBits) {
  // (A CPU without AVX2 has no SIMD level to compare: the loop below is then empty and the
  // portable level is checked against the references above.)
  if (!matmul_internal::IsaLevelSupported(IsaLevel::kAvx2)) return;
  for (const PagedCase& c : {PagedCase{64, 4, DType::kBF16}, PagedCase{72, 8, DType::kF16},
                             PagedCase{36, 1, DType::kF32}, PagedCase{80, 4, DType::kF32, KVQuant::kInt8}}) {
    PagedFixture f(c, 5);
    const int64_t n = f.p.num_tokens * f.Row();
    std::vector<float> want(n);
    PagedAttentionParams p = f.p;
    p.out = want.data();
    PagedAttentionAt(IsaLevel::kAvx2, p);
    for (IsaLevel level : cpu::SupportedAttentionIsas()) {
      if (level == IsaLevel::kGeneric) continue;
      std::vector<float> got(n, NAN);
      p.out = got.data();
      PagedAttentionAt(level, p);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)))
          << CaseName(c) << " at " << matmul_internal::IsaLevelName(level);
    }
  }
}

}  // namespace
}  // namespace pagoda
