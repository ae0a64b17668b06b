// The CPU MLA attention kernel against the float64 reference over a grid of latent ranks,
// RoPE widths, head counts, block sizes 1/16/256, odd lengths and KV dtypes; and its
// invariance to the batch, the block size and the thread count; quantized latents (and k_pe
// wide or quantized) in every per-token KV format against the reference, and the same
// invariances for them. Every test runs at every ISA level this CPU supports.
#include "kernels/cpu/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kv/kv_codec.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/mla_attention_ref.h"

namespace pagoda {
namespace {

using matmul_internal::IsaLevel;
using matmul_internal::IsaLevelName;

struct Case {
  int64_t kv_lora_rank, rope_dim, num_heads, block_size, len;
  DType kv_dtype;
};

// One sequence of `len` tokens in scrambled blocks, with queries for its last positions.
struct Fixture {
  std::vector<float> q, out, ref_out;
  std::vector<uint8_t> latent, rope;
  std::vector<int32_t> table, positions;
  std::vector<const int32_t*> tables;
  MlaAttentionParams p;

  Fixture(const Case& c, int64_t num_queries, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t num_blocks = (c.len + c.block_size - 1) / c.block_size + 3;
    table.resize(num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const int64_t slots = num_blocks * c.block_size;
    const int64_t esize = DTypeBlockBytes(c.kv_dtype);
    for (auto [buf, width] : {std::pair{&latent, c.kv_lora_rank}, std::pair{&rope, c.rope_dim}}) {
      std::vector<float> row(slots * width);
      for (float& x : row) x = normal(rng);
      if (rng() % 2 == 0) row[rng() % row.size()] = 30.0f;  // an outlier
      buf->resize(row.size() * esize);
      QuantizeRow(c.kv_dtype, row.data(), buf->data(), static_cast<int64_t>(row.size()));
    }
    // Unit-variance queries; the scale 1/sqrt(rank + rope) keeps the scores O(1).
    q.resize(num_queries * c.num_heads * (c.kv_lora_rank + c.rope_dim));
    for (float& x : q) x = normal(rng);
    out.assign(num_queries * c.num_heads * c.kv_lora_rank, 0.0f);
    ref_out = out;
    for (int64_t i = 0; i < num_queries; ++i)
      positions.push_back(static_cast<int32_t>(c.len - num_queries + i));
    tables.assign(num_queries, table.data());
    p.q = q.data();
    p.out = out.data();
    p.num_tokens = num_queries;
    p.num_heads = c.num_heads;
    p.kv_lora_rank = c.kv_lora_rank;
    p.rope_dim = c.rope_dim;
    p.latent_cache = latent.data();
    p.rope_cache = rope.data();
    p.kv_dtype = c.kv_dtype;
    p.block_size = c.block_size;
    p.positions = positions.data();
    p.block_tables = tables.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.kv_lora_rank + c.rope_dim));
  }
};

class MlaAttentionGridTest : public ::testing::TestWithParam<Case> {};

TEST_P(MlaAttentionGridTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  Fixture f(c, std::min<int64_t>(c.len, 5), 42 + c.len);
  MlaAttentionParams r = f.p;
  r.out = f.ref_out.data();
  ref::MlaAttention(r);
  double worst = 0;
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::fill(f.out.begin(), f.out.end(), NAN);
    MlaAttentionAt(level, f.p);
    // f32 accumulation over up to 513 keys of unit-variance values (one outlier of 30): a few
    // ulps of the output magnitude; outputs are convex combinations of c_kv rows.
    for (size_t i = 0; i < f.out.size(); ++i) {
      worst = std::max(worst, std::fabs(double{f.out[i]} - f.ref_out[i]));
      ASSERT_NEAR(f.out[i], f.ref_out[i], 2e-5 * 30) << i;
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

std::vector<Case> Grid() {
  std::vector<Case> cases;
  for (auto [rank, rope] : {std::pair<int64_t, int64_t>{64, 16}, {512, 64}, {96, 32}}) {
    for (int64_t heads : {1, 4, 20}) {
      for (int64_t bs : {1, 16, 256}) {
        for (int64_t len : {1, 17, 97, 513}) {
          if (rank == 512 && (len == 513 || heads == 20) && bs != 16) continue;  // keep it quick
          cases.push_back({rank, rope, heads, bs, len, DType::kF32});
        }
      }
    }
  }
  for (DType t : {DType::kBF16, DType::kF16}) {
    cases.push_back({64, 16, 4, 16, 97, t});
    cases.push_back({512, 64, 16, 1, 33, t});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, MlaAttentionGridTest, ::testing::ValuesIn(Grid()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "r" + std::to_string(c.kv_lora_rank) + "_pe" +
                                  std::to_string(c.rope_dim) + "_h" + std::to_string(c.num_heads) +
                                  "_bs" + std::to_string(c.block_size) + "_len" +
                                  std::to_string(c.len) + "_" + std::string(DTypeName(c.kv_dtype));
                         });

TEST(MlaAttentionTest, BitIdenticalWhateverTheBatchAndThreads) {
  const Case c{64, 16, 20, 16, 300, DType::kF32};  // 20 heads: two head items per token
  Fixture all(c, 8, 7);
  const int64_t row = c.num_heads * c.kv_lora_rank,
                qrow = c.num_heads * (c.kv_lora_rank + c.rope_dim);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    SetNumThreads(2);
    MlaAttentionAt(level, all.p);
    for (int threads : {1, 3}) {
      SetNumThreads(threads);
      for (int64_t t = 0; t < 8; ++t) {
        MlaAttentionParams one = all.p;
        std::vector<float> out(row);
        one.num_tokens = 1;
        one.q = all.q.data() + t * qrow;
        one.positions = all.positions.data() + t;
        one.block_tables = all.tables.data() + t;
        one.out = out.data();
        MlaAttentionAt(level, one);
        for (int64_t i = 0; i < row; ++i) ASSERT_EQ(out[i], all.out[t * row + i]) << "token " << t;
      }
    }
  }
  SetNumThreads(2);
}

// ---- quantized latents ------------------------------------------------------------------

struct QuantCase {
  KVQuant latent;
  KVQuant rope;  // kNone: k_pe stays bf16
  int64_t kv_lora_rank, rope_dim, num_heads, block_size, len;
};

std::string QuantName(KVQuant q) {
  switch (q) {
    case KVQuant::kNone: return "bf16";
    case KVQuant::kFp8E4M3: return "fp8e4m3";
    case KVQuant::kFp8E5M2: return "fp8e5m2";
    case KVQuant::kInt8: return "int8";
    case KVQuant::kInt4: return "int4";
    case KVQuant::kNvfp4: return "nvfp4";
    case KVQuant::kKivi2: return "kivi2";
  }
  return "?";
}

// One sequence in scrambled blocks, the caches written row by row in their formats (as
// KVStorage::Write does), wide arrays bf16.
struct QuantFixture {
  std::vector<float> q, out, ref_out;
  std::vector<uint8_t> latent, rope;
  std::vector<int32_t> table, positions;
  std::vector<const int32_t*> tables;
  MlaAttentionParams p;

  QuantFixture(const QuantCase& c, int64_t num_queries, uint64_t seed,
               std::vector<float>* c_kv_in = nullptr, std::vector<float>* k_pe_in = nullptr,
               std::vector<float>* q_in = nullptr) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t num_blocks = (c.len + c.block_size - 1) / c.block_size + 2;
    table.resize(num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    auto format = [&](KVQuant quant, int64_t d) {
      KVArrayFormat f;
      f.quant = quant;
      f.dtype = DType::kBF16;
      f.block_size = c.block_size;
      f.num_heads = 1;
      f.head_dim = d;
      f.group = std::min<int64_t>(32, d);
      return f;
    };
    p.latent_format = format(c.latent, c.kv_lora_rank);
    p.rope_format = format(c.rope, c.rope_dim);
    for (auto [buf, f, given] : {std::tuple{&latent, &p.latent_format, c_kv_in},
                                 std::tuple{&rope, &p.rope_format, k_pe_in}}) {
      const int64_t d = f->head_dim;
      std::vector<float> rows(c.len * d);
      if (given != nullptr) {
        rows = *given;
      } else {
        for (float& x : rows) x = normal(rng);
        rows[rng() % rows.size()] = 30.0f;  // an outlier
      }
      if (f->quant == KVQuant::kNone) {
        buf->assign(num_blocks * c.block_size * d * 2, 0);
      } else {
        buf->assign(num_blocks * KVBlockBytes(*f), 0);
      }
      for (int64_t pos = 0; pos < c.len; ++pos) {
        const int64_t block = table[pos / c.block_size], offset = pos % c.block_size;
        const float* x = &rows[pos * d];
        if (f->quant == KVQuant::kNone) {
          QuantizeRow(DType::kBF16, x, buf->data() + (block * c.block_size + offset) * d * 2, d);
        } else {
          QuantizeKVRow(*f, x, buf->data() + block * KVBlockBytes(*f), offset, 0);
        }
      }
    }
    q.resize(num_queries * c.num_heads * (c.kv_lora_rank + c.rope_dim));
    if (q_in != nullptr) {
      q = *q_in;
    } else {
      for (float& x : q) x = normal(rng);
    }
    out.assign(num_queries * c.num_heads * c.kv_lora_rank, 0.0f);
    ref_out = out;
    for (int64_t i = 0; i < num_queries; ++i)
      positions.push_back(static_cast<int32_t>(c.len - num_queries + i));
    tables.assign(num_queries, table.data());
    p.q = q.data();
    p.out = out.data();
    p.num_tokens = num_queries;
    p.num_heads = c.num_heads;
    p.kv_lora_rank = c.kv_lora_rank;
    p.rope_dim = c.rope_dim;
    p.latent_cache = latent.data();
    p.rope_cache = rope.data();
    p.kv_dtype = DType::kBF16;
    p.block_size = c.block_size;
    p.positions = positions.data();
    p.block_tables = tables.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.kv_lora_rank + c.rope_dim));
  }
};

class MlaQuantizedGridTest : public ::testing::TestWithParam<QuantCase> {};

// Kernel and reference decode the same rows (the shared row dequantizer), so they differ only
// by f32 vs double arithmetic: the wide cases' bound holds.
TEST_P(MlaQuantizedGridTest, MatchesFloat64Reference) {
  const QuantCase c = GetParam();
  QuantFixture f(c, std::min<int64_t>(c.len, 5), 11 + c.len);
  MlaAttentionParams r = f.p;
  r.out = f.ref_out.data();
  ref::MlaAttention(r);
  double worst = 0;
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::fill(f.out.begin(), f.out.end(), NAN);
    MlaAttentionAt(level, f.p);
    for (size_t i = 0; i < f.out.size(); ++i) {
      worst = std::max(worst, std::fabs(double{f.out[i]} - f.ref_out[i]));
      ASSERT_NEAR(f.out[i], f.ref_out[i], 2e-5 * 30) << i;
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

// The quantized kernel stays near the attention over the unquantized (bf16) rows: a sanity
// bound on the whole path, loose enough for int4 (7 levels per group).
TEST_P(MlaQuantizedGridTest, StaysNearTheBf16Cache) {
  const QuantCase c = GetParam();
  QuantFixture f(c, std::min<int64_t>(c.len, 5), 11 + c.len);
  QuantCase wide = c;
  wide.latent = wide.rope = KVQuant::kNone;
  QuantFixture w(wide, std::min<int64_t>(c.len, 5), 11 + c.len);
  MlaAttention(f.p);
  MlaAttention(w.p);
  double err = 0, norm = 0;
  for (size_t i = 0; i < f.out.size(); ++i) {
    err += (double{f.out[i]} - w.out[i]) * (double{f.out[i]} - w.out[i]);
    norm += double{w.out[i]} * w.out[i];
  }
  const double rel = std::sqrt(err / norm);
  RecordProperty("relative_l2_error", std::to_string(rel));
  EXPECT_LT(rel, c.latent == KVQuant::kInt4 || c.latent == KVQuant::kNvfp4 ||
                         c.rope == KVQuant::kInt4 || c.rope == KVQuant::kNvfp4 ||
                         c.latent == KVQuant::kFp8E5M2 || c.rope == KVQuant::kFp8E5M2
                     ? 0.5
                     : 0.1);
}

std::vector<QuantCase> QuantGrid() {
  std::vector<QuantCase> cases;
  for (KVQuant lat : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4,
                      KVQuant::kNvfp4}) {
    for (bool quantize_rope : {false, true}) {
      const KVQuant rope = quantize_rope ? lat : KVQuant::kNone;
      cases.push_back({lat, rope, 64, 16, 4, 16, 97});
      cases.push_back({lat, rope, 512, 64, 16, 1, 33});
      cases.push_back({lat, rope, 96, 32, 20, 256, 300});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Quant, MlaQuantizedGridTest, ::testing::ValuesIn(QuantGrid()),
                         [](const auto& info) {
                           const QuantCase& c = info.param;
                           return QuantName(c.latent) + "_pe" + QuantName(c.rope) + "_r" +
                                  std::to_string(c.kv_lora_rank) + "_h" +
                                  std::to_string(c.num_heads) + "_bs" +
                                  std::to_string(c.block_size) + "_len" + std::to_string(c.len);
                         });

// Rows are quantized per token, so the codes do not depend on the block size, and the tiles
// do not depend on it either: the same bits for block sizes 1, 16 and 256, for one query
// alone or in a batch, on any number of threads.
TEST(MlaAttentionTest, QuantizedBitIdenticalWhateverTheBlockSizeBatchAndThreads) {
  const int64_t len = 150, r = 64, dr = 16, heads = 20, nq = 6;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> c_kv(len * r), k_pe(len * dr), q(nq * heads * (r + dr));
  for (auto* v : {&c_kv, &k_pe, &q})
    for (float& x : *v) x = normal(rng);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    for (KVQuant quant : {KVQuant::kFp8E4M3, KVQuant::kInt4}) {
      std::vector<float> first;
      for (int64_t bs : {1, 16, 256}) {
        QuantFixture f({quant, KVQuant::kNone, r, dr, heads, bs, len}, nq, 9, &c_kv, &k_pe, &q);
        SetNumThreads(bs == 16 ? 3 : 2);
        MlaAttentionAt(level, f.p);
        if (first.empty()) first = f.out;
        ASSERT_EQ(f.out, first) << QuantName(quant) << " block size " << bs;
        const int64_t row = heads * r, qrow = heads * (r + dr);
        for (int64_t t = 0; t < nq; ++t) {
          MlaAttentionParams one = f.p;
          std::vector<float> out(row);
          one.num_tokens = 1;
          one.q = f.q.data() + t * qrow;
          one.positions = f.positions.data() + t;
          one.block_tables = f.tables.data() + t;
          one.out = out.data();
          MlaAttentionAt(level, one);
          for (int64_t i = 0; i < row; ++i) ASSERT_EQ(out[i], first[t * row + i]) << "token " << t;
        }
      }
    }
  }
  SetNumThreads(2);
}

TEST(MlaAttentionTest, BitIdenticalWhateverTheBlockSize) {
  const int64_t len = 150, r = 64, dr = 16, heads = 3;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> c_kv(len * r), k_pe(len * dr), q(heads * (r + dr));
  for (auto* v : {&c_kv, &k_pe, &q})
    for (float& x : *v) x = normal(rng);
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::vector<float> first;
    for (int64_t bs : {1, 16, 256}) {
      const int64_t nb = (len + bs - 1) / bs;
      std::vector<int32_t> table(nb);
      std::iota(table.rbegin(), table.rend(), 0);
      std::vector<float> lat(nb * bs * r), pe(nb * bs * dr);
      for (int64_t p = 0; p < len; ++p) {
        const int64_t slot = int64_t{table[p / bs]} * bs + p % bs;
        std::copy_n(&c_kv[p * r], r, &lat[slot * r]);
        std::copy_n(&k_pe[p * dr], dr, &pe[slot * dr]);
      }
      std::vector<float> out(heads * r);
      const int32_t pos = len - 1;
      const int32_t* tp = table.data();
      MlaAttentionParams prm;
      prm.q = q.data();
      prm.out = out.data();
      prm.num_tokens = 1;
      prm.num_heads = heads;
      prm.kv_lora_rank = r;
      prm.rope_dim = dr;
      prm.latent_cache = lat.data();
      prm.rope_cache = pe.data();
      prm.block_size = bs;
      prm.positions = &pos;
      prm.block_tables = &tp;
      prm.scale = 0.125f;
      MlaAttentionAt(level, prm);
      if (first.empty()) first = out;
      ASSERT_EQ(out, first) << "block size " << bs;
    }
  }
}

}  // namespace
}  // namespace pagoda
