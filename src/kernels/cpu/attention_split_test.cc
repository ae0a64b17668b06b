// Flash-decoding splits: a long context computed in kAttentionSplit windows merged by
// log-sum-exp matches the float64 reference, and the bits do not depend on the batch,
// the thread count or the block size; at every ISA level this CPU supports.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/parallel.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/attention_ref.h"

namespace pagoda {
namespace {

using matmul_internal::IsaLevel;
using matmul_internal::IsaLevelName;

struct LongContext {
  int64_t len, d = 64, kvh = 2, heads = 8, block_size;
  std::vector<float> k, v, q;
  std::vector<int32_t> table, positions;
  std::vector<const int32_t*> tables;

  LongContext(int64_t n, int64_t bs, int64_t num_queries) : len(n), block_size(bs) {
    std::mt19937_64 rng(n * 31);
    std::normal_distribution<float> normal;
    const int64_t nb = (len + bs - 1) / bs;
    table.resize(nb);
    std::iota(table.rbegin(), table.rend(), 0);
    k.resize(nb * bs * kvh * d);
    v.resize(k.size());
    // Keys and values by position, laid out through the (reversed) block table.
    std::vector<float> kp(len * kvh * d), vp(kp.size());
    for (float& x : kp) x = normal(rng);
    for (float& x : vp) x = normal(rng);
    for (int64_t p = 0; p < len; ++p) {
      const int64_t slot = int64_t{table[p / bs]} * bs + p % bs;
      std::copy_n(&kp[p * kvh * d], kvh * d, &k[slot * kvh * d]);
      std::copy_n(&vp[p * kvh * d], kvh * d, &v[slot * kvh * d]);
    }
    q.resize(num_queries * heads * d);
    for (float& x : q) x = normal(rng);
    for (int64_t i = 0; i < num_queries; ++i) positions.push_back(static_cast<int32_t>(len - num_queries + i));
    tables.assign(num_queries, table.data());
  }

  PagedAttentionParams Params(float* out, int64_t first, int64_t count) const {
    PagedAttentionParams p;
    p.q = q.data() + first * heads * d;
    p.out = out;
    p.num_tokens = count;
    p.num_heads = heads;
    p.num_kv_heads = kvh;
    p.head_dim = d;
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.block_size = block_size;
    p.positions = positions.data() + first;
    p.block_tables = tables.data() + first;
    p.scale = 0.125f;
    return p;
  }
};

TEST(AttentionSplitTest, LongContextMatchesReference) {
  for (int64_t len : {511, 512, 513, 1500, 2049}) {
    LongContext c(len, 16, 3);
    std::vector<float> out(3 * c.heads * c.d), ref(out.size());
    ref::PagedAttention(c.Params(ref.data(), 0, 3));
    for (IsaLevel level : cpu::SupportedAttentionIsas()) {
      SCOPED_TRACE(IsaLevelName(level));
      PagedAttentionAt(level, c.Params(out.data(), 0, 3));
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << "len " << len << " at " << i;
    }
  }
}

TEST(AttentionSplitTest, SplitDecodeIsBitIdenticalWhateverTheBatchThreadsAndBlockSize) {
  for (IsaLevel level : cpu::SupportedAttentionIsas()) {
    SCOPED_TRACE(IsaLevelName(level));
    std::vector<float> first;
    for (int64_t bs : {1, 16, 256}) {
      LongContext c(1300, bs, 4);
      std::vector<float> batch(4 * c.heads * c.d);
      SetNumThreads(2);
      PagedAttentionAt(level, c.Params(batch.data(), 0, 4));
      if (first.empty()) first = batch;
      ASSERT_EQ(batch, first) << "block size " << bs;
      for (int threads : {1, 3}) {
        SetNumThreads(threads);
        for (int64_t t = 0; t < 4; ++t) {
          std::vector<float> one(c.heads * c.d);
          PagedAttentionAt(level, c.Params(one.data(), t, 1));
          ASSERT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + t * c.heads * c.d))
              << "token " << t << " threads " << threads;
        }
      }
    }
  }
  SetNumThreads(2);
}

TEST(AttentionSplitTest, PrefillRunsAreBitIdenticalToTokensAlone) {
  // A prefill's consecutive tokens share tile steps (up to 32 query rows): the whole prompt
  // and a chunk that starts inside the first window must give each token the bits it gets
  // alone, and match the reference.
  struct Chunk {
    int64_t len, num_queries;
  };
  for (const Chunk ch : {Chunk{1100, 1100}, Chunk{700, 200}}) {
    LongContext c(ch.len, 16, ch.num_queries);
    std::vector<float> batch(ch.num_queries * c.heads * c.d), ref(batch.size());
    ref::PagedAttention(c.Params(ref.data(), 0, ch.num_queries));
    for (IsaLevel level : cpu::SupportedAttentionIsas()) {
      SCOPED_TRACE(IsaLevelName(level));
      SetNumThreads(2);
      PagedAttentionAt(level, c.Params(batch.data(), 0, ch.num_queries));
      for (size_t i = 0; i < batch.size(); ++i) ASSERT_NEAR(batch[i], ref[i], 2e-5) << "len " << ch.len << " at " << i;
      for (int64_t t = 0; t < ch.num_queries; ++t) {
        const int64_t pos = c.positions[t];
        if (t % 13 != 0 && pos % 64 > 1 && pos % 64 < 62 && t + 1 != ch.num_queries) continue;
        std::vector<float> one(c.heads * c.d);
        PagedAttentionAt(level, c.Params(one.data(), t, 1));
        ASSERT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + t * c.heads * c.d))
            << "len " << ch.len << " position " << pos;
      }
    }
  }
  SetNumThreads(2);
}

}  // namespace
}  // namespace pagoda
