// The quantized CPU KV cache: bytes as KVBytesPerToken predicts them, capacity at a fixed
// budget, and attention results that do not depend on how tokens were written (one prefill,
// chunks, or token by token), on copy-on-write, or on the side pool's history.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kv/kv_layout.h"
#include "backend/kv_storage.h"

namespace pagoda {
namespace {

constexpr KVCacheDType kQuantized[] = {KVCacheDType::kFp8E4M3, KVCacheDType::kFp8E5M2,
                                       KVCacheDType::kInt8,    KVCacheDType::kInt4,
                                       KVCacheDType::kNvfp4,   KVCacheDType::kKivi2};

// llama-gqa's cache: 4 layers, 2 KV heads of 64.
KVShape GqaShape() { return KVShape{4, 2, 64, 64, 0, false}; }

KVStorageShape StorageShape(const KVShape& s, KVCacheDType t, const KVQuantOptions& o,
                            int64_t num_blocks) {
  KVStorageShape base;
  base.num_layers = s.num_layers;
  base.num_blocks = num_blocks;
  base.block_size = o.block_size;
  base.num_kv_heads = s.num_kv_heads;
  base.head_dim = s.head_dim_k;
  base.head_dim_v = s.head_dim_v;
  base.dtype = t == KVCacheDType::kF32 ? DType::kF32 : DType::kBF16;
  return ApplyKVCacheFormat(base, t, o);
}

TEST(KVQuantStorageTest, BytesPerTokenIsWhatTheAllocatorAllocates) {
  for (const KVShape& s :
       {GqaShape(), KVShape{3, 1, 80, 80, 0, false}, KVShape{5, 4, 8, 8, 0, false}}) {
    for (int64_t bs : {1, 16, 32}) {
      for (KVCacheDType t :
           {KVCacheDType::kBF16, KVCacheDType::kFp8E4M3, KVCacheDType::kFp8E5M2,
            KVCacheDType::kInt8, KVCacheDType::kInt4, KVCacheDType::kNvfp4, KVCacheDType::kKivi2}) {
        for (int variant = 0; variant < 3; ++variant) {
          const bool skip = variant == 1;
          KVQuantOptions o;
          o.block_size = bs;
          if (skip) o.skip_layers = {0, s.num_layers - 1};
          if (variant == 2) o.heavy_tokens = std::min<int64_t>(bs, 2);
          const int64_t num_blocks = 3;
          KVStorage cache(StorageShape(s, t, o, num_blocks));
          EXPECT_EQ(cache.bytes(), num_blocks * bs * KVBytesPerToken(s, t, o))
              << KVCacheDTypeName(t) << " d " << s.head_dim_k << " bs " << bs << " skip " << skip;
        }
      }
    }
  }
}

TEST(KVQuantStorageTest, CapacityAtAFixedBudgetOnLlamaGqa) {
  const int64_t budget = int64_t{1} << 30;
  KVQuantOptions o;
  auto tokens = [&](KVCacheDType t) {
    KVStorage probe(StorageShape(GqaShape(), t, o, 1));  // measured, not the formula
    return NumKVBlocks(budget, o.block_size, probe.bytes() / o.block_size) * o.block_size;
  };
  const double bf16 = static_cast<double>(tokens(KVCacheDType::kBF16));
  auto ratio = [&](KVCacheDType t) { return tokens(t) / bf16; };
  EXPECT_NEAR(ratio(KVCacheDType::kFp8E4M3), 1.88, 0.01);  // 256 / 136 bytes
  EXPECT_NEAR(ratio(KVCacheDType::kInt8), 1.88, 0.01);     // 256 / 136
  EXPECT_NEAR(ratio(KVCacheDType::kInt4), 3.56, 0.01);     // 256 / 72
  EXPECT_NEAR(ratio(KVCacheDType::kNvfp4), 3.56, 0.01);    // 256 / 72
  EXPECT_NEAR(ratio(KVCacheDType::kKivi2), 4.57, 0.01);    // 256 / 56 at block size 16
  o.block_size = 64;
  EXPECT_NEAR(ratio(KVCacheDType::kKivi2), 256.0 / 44, 0.01);  // 5.8x at block size 64
}

// Writes `len` tokens of one sequence in chunks of `chunk` (blocks in reverse order), running
// attention for each chunk's queries as the model does; returns every query's output.
std::vector<float> RunSequence(KVStorage& cache, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<float>& q,
                               int64_t len, int64_t chunk, int64_t num_heads) {
  const KVStorageShape& s = cache.shape();
  const int64_t d = s.head_dim, kw = s.num_kv_heads * d;
  std::vector<int32_t> table(s.num_blocks);
  for (int64_t i = 0; i < s.num_blocks; ++i) table[i] = static_cast<int32_t>(s.num_blocks - 1 - i);
  std::vector<float> out(len * num_heads * d);
  for (int64_t start = 0; start < len; start += chunk) {
    const int64_t n = std::min(chunk, len - start);
    std::vector<int64_t> slots;
    std::vector<int32_t> positions;
    std::vector<const int32_t*> tables;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = start + i;
      slots.push_back(int64_t{table[pos / s.block_size]} * s.block_size + pos % s.block_size);
      positions.push_back(static_cast<int32_t>(pos));
      tables.push_back(table.data());
    }
    for (int64_t l = 0; l < s.num_layers; ++l) {
      cache.Write(l, &k[start * kw], &v[start * kw], slots.data(), n, positions.data());
      cache.ObserveQueries(l, &q[start * num_heads * d], num_heads, slots.data(), n, 0.125f);
      PagedAttentionParams p;
      p.q = &q[start * num_heads * d];
      p.out = &out[start * num_heads * d];
      p.num_tokens = n;
      p.num_heads = num_heads;
      p.num_kv_heads = s.num_kv_heads;
      p.head_dim = d;
      p.block_size = s.block_size;
      p.positions = positions.data();
      p.block_tables = tables.data();
      p.scale = 0.125f;
      cache.FillAttentionParams(l, &p);
      PagedAttention(p);
    }
  }
  return out;
}

TEST(KVQuantStorageTest, SameResultsWhateverTheChunking) {
  const int64_t len = 75, heads = 4;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  const KVShape shape{1, 2, 64, 64, 0, false};
  std::vector<float> k(len * 128), v(len * 128), q(len * heads * 64);
  for (auto* x : {&k, &v, &q})
    for (float& f : *x) f = normal(rng);
  for (KVCacheDType t : kQuantized) {
    for (int policy = 0; policy < 4; ++policy) {
      KVQuantOptions o;
      if (policy == 1) o.sink_tokens = 4;
      if (policy == 2) o.recent_tokens = 6;
      if (policy == 3) o.heavy_tokens = 3;
      SCOPED_TRACE(std::string(KVCacheDTypeName(t)) + " policy " + std::to_string(policy));
      std::vector<float> first;
      for (int64_t chunk : {len, int64_t{1}, int64_t{7}, int64_t{16}}) {
        KVStorage cache(StorageShape(shape, t, o, 6));
        const std::vector<float> out = RunSequence(cache, k, v, q, len, chunk, heads);
        if (first.empty()) first = out;
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], first[i]) << "chunk " << chunk << " query " << i / (heads * 64) << " head "
                                      << i / 64 % heads;
        }
      }
      // ... and closer to the exact result than the format alone would be (not all garbage).
      KVStorage exact(StorageShape(shape, KVCacheDType::kF32, {}, 6));
      const std::vector<float> ref = RunSequence(exact, k, v, q, len, len, heads);
      double err = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        err = std::max(err, std::fabs(double{ref[i]} - first[i]));
      EXPECT_LT(err, t == KVCacheDType::kKivi2 ? 1.5 : 0.6);
    }
  }
}

TEST(KVQuantStorageTest, CopyBlockCopiesCodesAndWideCopies) {
  KVQuantOptions o;
  o.recent_tokens = 4;
  const KVShape shape{2, 1, 64, 64, 0, false};
  for (KVCacheDType t : kQuantized) {
    KVStorage cache(StorageShape(shape, t, o, 4));
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal;
    std::vector<float> k(10 * 64), v(10 * 64);
    for (auto* x : {&k, &v})
      for (float& f : *x) f = normal(rng);
    std::vector<int64_t> slots;
    std::vector<int32_t> positions;
    for (int i = 0; i < 10; ++i) {
      slots.push_back(16 + i);  // block 1, partly filled
      positions.push_back(i);
    }
    for (int64_t l = 0; l < 2; ++l)
      cache.Write(l, k.data(), v.data(), slots.data(), 10, positions.data());
    cache.CopyBlock(1, 3);
    std::vector<float> a(64), b(64);
    for (int64_t l = 0; l < 2; ++l) {
      for (int i = 0; i < 10; ++i) {
        for (bool value : {false, true}) {
          cache.ReadSlot(l, value, 16 + i, a.data());
          cache.ReadSlot(l, value, 48 + i, b.data());
          ASSERT_EQ(a, b) << KVCacheDTypeName(t) << " layer " << l << " offset " << i;
        }
      }
    }
  }
}

// A block filled by the last step, freed and then copied into (copy-on-write for a fork: a new
// use) keeps the copy it was given: the next Write does not release it as the filled block's,
// so the fork reads the source's wide rows (kivi2: its residual keys, which have no codes). And
// ReleaseBlocks gives the copies of freed blocks back to the pool for the next ones.
TEST(KVQuantStorageTest, ACopyIntoAJustFilledBlockKeepsItsWideCopy) {
  KVQuantOptions o;
  o.block_size = 4;
  o.recent_tokens = 2;
  const KVShape shape{1, 1, 32, 32, 0, false};
  for (const KVCacheDType t : {KVCacheDType::kKivi2, KVCacheDType::kInt4}) {
    SCOPED_TRACE(KVCacheDTypeName(t));
    KVStorage cache(StorageShape(shape, t, o, 4));
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal;
    auto write = [&](std::vector<int64_t> slots, std::vector<int32_t> positions) {
      std::vector<float> k(slots.size() * 32), v(slots.size() * 32);
      for (auto* x : {&k, &v})
        for (float& f : *x) f = normal(rng);
      cache.Write(0, k.data(), v.data(), slots.data(), static_cast<int64_t>(slots.size()), positions.data());
    };
    write({0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5});  // block 0 filled, block 1 holds 2 rows
    const int64_t side = cache.side_bytes();
    cache.CopyBlock(1, 0);  // block 0 freed and reused as the fork's copy of block 1
    write({2}, {6});        // the fork's next token, at offset 2 of block 0
    std::vector<float> a(32), b(32);
    for (int64_t offset = 0; offset < 2; ++offset) {
      for (const bool value : {false, true}) {
        cache.ReadSlot(0, value, 4 + offset, a.data());
        cache.ReadSlot(0, value, offset, b.data());
        EXPECT_EQ(a, b) << (value ? "V" : "K") << " offset " << offset;
      }
    }
    // Both sequences end: their blocks' copies go back, and the next two sequences' tail
    // blocks take them instead of growing the pool.
    const std::vector<int32_t> freed = {0, 1};
    cache.ReleaseBlocks(freed);
    write({8, 12}, {0, 0});
    EXPECT_EQ(cache.side_bytes(), side);
  }
}

TEST(KVQuantStorageTest, SkippedLayersStayWide) {
  KVQuantOptions o;
  o.skip_layers = {1};
  KVStorage cache(StorageShape(GqaShape(), KVCacheDType::kInt4, o, 2));
  EXPECT_EQ(cache.k_format(0).quant, KVQuant::kInt4);
  EXPECT_EQ(cache.k_format(1).quant, KVQuant::kNone);
  EXPECT_EQ(cache.k_format(1).dtype, DType::kBF16);
  o.skip_layers = {4};
  EXPECT_THROW(KVStorage bad(StorageShape(GqaShape(), KVCacheDType::kInt4, o, 2)), Error);
}

}  // namespace
}  // namespace pagoda
