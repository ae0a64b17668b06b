// The CPU paged attention kernel against the float64 reference over a grid of shapes,
// block sizes, GQA ratios, lengths, windows and KV dtypes; and its invariance to the
// batch, the block size and the thread count. Every test runs at every ISA level this CPU
// supports (cpu::SupportedAttentionIsas()).
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kv/kv_codec.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/attention_ref.h"

namespace pagoda {
namespace {

using matmul_internal::IsaLevel;
using matmul_internal::IsaLevelName;

struct Case {
  int64_t head_dim, block_size, num_kv_heads, group, len, window;
  DType kv_dtype;
  KVQuant quant = KVQuant::kNone;
  bool wide = false;  // a bf16 side pool: sink 3, recent 5 (kivi2: the whole own block)
};

// A cache holding one sequence of `len` tokens at scrambled blocks, plus queries for the
// last `num_queries` positions.
struct Fixture {
  std::vector<float> q, out, ref_out;
  std::vector<uint8_t> k, v, k_wide, v_wide;
  std::vector<int32_t> table, positions, wide_index;
  std::vector<const int32_t*> tables;
  PagedAttentionParams p;

  Fixture(const Case& c, int64_t num_queries, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t num_heads = c.num_kv_heads * c.group;
    const int64_t num_blocks = (c.len + c.block_size - 1) / c.block_size + 3;
    table.resize(num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const int64_t elems = num_blocks * c.block_size * c.num_kv_heads * c.head_dim;
    const int64_t esize = DTypeBlockBytes(c.kv_dtype);
    k.resize(elems * esize);
    v.resize(elems * esize);
    std::vector<float> row(elems);
    KVArrayFormat fk;
    fk.quant = c.quant;
    fk.block_size = c.block_size;
    fk.num_heads = c.num_kv_heads;
    fk.head_dim = c.head_dim;
    fk.per_channel = c.quant == KVQuant::kKivi2;
    KVArrayFormat fv = fk;
    fv.per_channel = false;
    for (auto* buf : {&k, &v}) {
      for (float& x : row) x = normal(rng);
      if (rng() % 2 == 0) row[rng() % elems] = 30.0f;  // an outlier
      if (c.quant == KVQuant::kNone) {
        QuantizeRow(c.kv_dtype, row.data(), buf->data(), elems);
      } else {
        // Quantized blocks; the wide copies (bf16) of every block hold the same values.
        const KVArrayFormat& f = buf == &k ? fk : fv;
        const int64_t per_block = c.block_size * c.num_kv_heads * c.head_dim;
        buf->assign(num_blocks * KVBlockBytes(f), 0);
        for (int64_t b = 0; b < num_blocks; ++b) {
          QuantizeKVBlock(f, row.data() + b * per_block, buf->data() + b * KVBlockBytes(f));
        }
        auto& wide = buf == &k ? k_wide : v_wide;
        wide.resize(elems * 2);
        QuantizeRow(DType::kBF16, row.data(), wide.data(), elems);
      }
    }
    q.resize(num_queries * num_heads * c.head_dim);
    for (float& x : q) x = normal(rng);
    out.assign(q.size(), 0.0f);
    ref_out.assign(q.size(), 0.0f);
    for (int64_t i = 0; i < num_queries; ++i) positions.push_back(static_cast<int32_t>(c.len - num_queries + i));
    tables.assign(num_queries, table.data());
    p.q = q.data();
    p.out = out.data();
    p.num_tokens = num_queries;
    p.num_heads = num_heads;
    p.num_kv_heads = c.num_kv_heads;
    p.head_dim = c.head_dim;
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.kv_dtype = c.kv_dtype;
    p.block_size = c.block_size;
    p.positions = positions.data();
    p.block_tables = tables.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    p.sliding_window = c.window;
    if (c.quant != KVQuant::kNone) {
      p.k_format = fk;
      p.v_format = fv;
    }
    if (c.wide) {
      // Every other block has a wide copy (wide block i = block i), so both paths are read.
      for (int64_t b = 0; b < num_blocks; ++b) wide_index.push_back(b % 2 == 0 || c.quant == KVQuant::kKivi2 ? b : -1);
      p.k_wide = k_wide.data();
      p.v_wide = v_wide.data();
      p.wide_dtype = DType::kBF16;
      p.wide_index = wide_index.data();
      p.sink_tokens = 3;
      p.recent_tokens = 5;
      p.own_block_wide = c.quant == KVQuant::kKivi2;
    }
  }
};

class AttentionGridTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionGridTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  Fixture f(c, std::min<int64_t>(c.len, 5), 42 + c.len);
  PagedAttentionParams r = f.p;
  r.out = f.ref_out.data();
  ref::PagedAttention(r);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::fill(f.out.begin(), f.out.end(), NAN);
    PagedAttentionAt(level, f.p);
    // f32 accumulation over up to 513 keys of unit-variance values: a few ulps of the
    // output magnitude (outputs are convex combinations of V rows, |V| <= 30).
    for (size_t i = 0; i < f.out.size(); ++i) ASSERT_NEAR(f.out[i], f.ref_out[i], 2e-5 * 30) << i;
  }
}

std::vector<Case> Grid() {
  std::vector<Case> cases;
  for (int64_t hd : {64, 80, 128, 256}) {
    for (int64_t bs : {1, 16, 256}) {
      for (int64_t group : {1, 4, 8}) {
        for (int64_t len : {1, 17, 97, 513}) {
          if (hd != 64 && len == 513 && bs != 16) continue;  // keep the grid quick
          cases.push_back({hd, bs, 2, group, len, 0, DType::kF32});
        }
      }
    }
  }
  for (DType t : {DType::kBF16, DType::kF16}) cases.push_back({64, 16, 2, 4, 97, 0, t});
  // Every quantized format, dequantized row by row inside the kernel.
  for (KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4,
                    KVQuant::kNvfp4, KVQuant::kKivi2}) {
    for (int64_t hd : {64, 80, 128}) {
      for (int64_t bs : {1, 16, 256}) {
        for (int64_t len : {1, 17, 97, 513}) {
          if (len == 513 && (bs != 16 || hd != 64)) continue;
          if (q == KVQuant::kKivi2 && bs == 1) continue;  // per-channel over 1 token is lossless
          cases.push_back({hd, bs, 2, 4, len, 0, DType::kF32, q, (len + bs) % 2 == 1});
        }
      }
    }
    cases.push_back({64, 16, 2, 8, 200, 64, DType::kF32, q, true});
  }
  for (int64_t window : {1, 24, 64, 100}) cases.push_back({64, 16, 2, 2, 200, window, DType::kF32});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, AttentionGridTest, ::testing::ValuesIn(Grid()), [](const auto& info) {
  const Case& c = info.param;
  return "d" + std::to_string(c.head_dim) + "_bs" + std::to_string(c.block_size) + "_g" +
         std::to_string(c.group) + "_len" + std::to_string(c.len) + "_w" + std::to_string(c.window) +
         "_" + std::string(DTypeName(c.kv_dtype)) + "_q" + std::to_string(int(c.quant)) +
         (c.wide ? "_wide" : "");
});

class AttentionInvarianceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionInvarianceTest, BitIdenticalWhateverTheBatchAndThreads) {
  const Case c = GetParam();
  Fixture all(c, 8, 7);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    SetNumThreads(2);
    PagedAttentionAt(level, all.p);
    for (int threads : {1, 3}) {
      SetNumThreads(threads);
      for (int64_t t = 0; t < 8; ++t) {
        PagedAttentionParams one = all.p;
        std::vector<float> out(all.p.num_heads * c.head_dim);
        one.num_tokens = 1;
        one.q = all.q.data() + t * all.p.num_heads * c.head_dim;
        one.positions = all.positions.data() + t;
        one.block_tables = all.tables.data() + t;
        one.out = out.data();
        PagedAttentionAt(level, one);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], all.out[t * all.p.num_heads * c.head_dim + i]) << "token " << t;
        }
      }
    }
  }
  SetNumThreads(2);
}

INSTANTIATE_TEST_SUITE_P(Formats, AttentionInvarianceTest,
                         ::testing::Values(Case{64, 16, 2, 4, 300, 0, DType::kF32},
                                           Case{64, 16, 2, 4, 300, 0, DType::kF32, KVQuant::kInt4, true},
                                           Case{64, 16, 2, 4, 300, 0, DType::kF32, KVQuant::kKivi2, true},
                                           Case{64, 16, 2, 4, 300, 0, DType::kF32, KVQuant::kFp8E4M3}));

TEST(AttentionTest, BitIdenticalWhateverTheBlockSize) {
  // The same keys laid out in blocks of 1, 16 and 256 give the same bits.
  const int64_t len = 150, d = 64, kvh = 1, heads = 2;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> keys(len * kvh * d), values(len * kvh * d), q(heads * d);
  for (auto* v : {&keys, &values, &q}) for (float& x : *v) x = normal(rng);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::vector<float> first;
    for (int64_t bs : {1, 16, 256}) {
      const int64_t nb = (len + bs - 1) / bs;
      std::vector<int32_t> table(nb);
      std::iota(table.rbegin(), table.rend(), 0);
      std::vector<float> k(nb * bs * kvh * d), v(k.size());
      for (int64_t p = 0; p < len; ++p) {
        const int64_t slot = int64_t{table[p / bs]} * bs + p % bs;
        std::copy_n(&keys[p * d], d, &k[slot * d]);
        std::copy_n(&values[p * d], d, &v[slot * d]);
      }
      std::vector<float> out(heads * d);
      const int32_t pos = len - 1;
      const int32_t* tp = table.data();
      PagedAttentionParams prm;
      prm.q = q.data(); prm.out = out.data(); prm.num_tokens = 1; prm.num_heads = heads;
      prm.num_kv_heads = kvh; prm.head_dim = d; prm.k_cache = k.data(); prm.v_cache = v.data();
      prm.block_size = bs; prm.positions = &pos; prm.block_tables = &tp; prm.scale = 0.125f;
      PagedAttentionAt(level, prm);
      if (first.empty()) first = out;
      ASSERT_EQ(out, first) << "block size " << bs;
    }
  }
}

}  // namespace
}  // namespace pagoda
