// Scenario tests in the style of vLLM's test_prefix_caching.py: exact block ids, reference
// counts and free-queue order after each step.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace pagoda {
namespace {

using Ids = std::vector<int32_t>;

std::vector<int32_t> Range(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Ids Table(const KVCacheManager& m, int64_t id) {
  auto s = m.GetBlockIds(id);
  return Ids(s.begin(), s.end());
}

Ids Refs(const KVCacheManager& m) {
  Ids r;
  for (int32_t b = 0; b < m.num_blocks(); ++b) r.push_back(m.block_pool().ref_cnt(b));
  return r;
}

KVRequest R(int64_t id, std::span<const int32_t> tokens, int64_t num_computed_tokens,
            std::string_view extra_keys = {}) {
  KVRequest r;
  r.request_id = id;
  r.token_ids = tokens;
  r.num_computed_tokens = num_computed_tokens;
  r.extra_keys = extra_keys;
  return r;
}

KVCacheManager Make(int32_t num_blocks, int32_t block_size, bool caching = true) {
  return KVCacheManager({num_blocks, block_size, caching, PrefixHashAlgo::kSha256});
}

// Blocks freed tail first return to the queue in descending order; a new request's blocks come
// out of it ascending, so that consecutive free blocks are consecutive slots in its table.
TEST(KVCacheManagerTest, NewBlocksAreTakenInQueueOrderAndTabledAscending) {
  KVCacheManager m = Make(8, 4);
  const auto t0 = Range(0, 16);
  ComputedBlocks hit = m.GetComputedBlocks(t0);
  ASSERT_TRUE(m.AllocateSlots(R(0, t0, 0), 16, &hit));
  EXPECT_EQ(Table(m, 0), (Ids{0, 1, 2, 3}));
  m.Free(0);
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{4, 5, 6, 7, 3, 2, 1, 0}));
  const auto t1 = Range(100, 24);  // no hit: six new blocks, the queue's first six
  hit = m.GetComputedBlocks(t1);
  auto a = m.AllocateSlots(R(1, t1, 0), 24, &hit);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Table(m, 1), (Ids{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{1, 0}));
}

TEST(KVCacheManagerTest, PrefillHitsSharedPrefixAndEvictsInLruOrder) {
  KVCacheManager m = Make(10, 4);
  // Request 0: 10 tokens = two full blocks and a partial one.
  const auto t0 = Range(0, 10);
  ComputedBlocks hit = m.GetComputedBlocks(t0);
  EXPECT_TRUE(hit.block_ids.empty());
  EXPECT_EQ(hit.num_computed_tokens, 0);
  auto a = m.AllocateSlots(R(0, t0, 0), 10, &hit);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{0, 1, 2}));
  EXPECT_TRUE(a->copies.empty());
  EXPECT_EQ(Table(m, 0), (Ids{0, 1, 2}));
  EXPECT_TRUE(m.block_pool().is_cached(0));
  EXPECT_TRUE(m.block_pool().is_cached(1));
  EXPECT_FALSE(m.block_pool().is_cached(2));  // partial blocks are never cached
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{3, 4, 5, 6, 7, 8, 9}));

  // Request 1 shares the first 8 tokens.
  const auto t1 = Concat(Range(0, 8), {100, 101, 102});
  hit = m.GetComputedBlocks(t1);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1}));
  EXPECT_EQ(hit.num_computed_tokens, 8);
  a = m.AllocateSlots(R(1, t1, 0), 3, &hit);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{3}));
  EXPECT_EQ(Table(m, 1), (Ids{0, 1, 3}));
  EXPECT_EQ(Refs(m), (Ids{2, 2, 1, 1, 0, 0, 0, 0, 0, 0}));

  // Request 2 is exactly the 8 cached tokens: the last block is recomputed for logits.
  const auto t2 = Range(0, 8);
  hit = m.GetComputedBlocks(t2);
  EXPECT_EQ(hit.block_ids, (Ids{0}));
  EXPECT_EQ(hit.num_computed_tokens, 4);
  a = m.AllocateSlots(R(2, t2, 0), 4, &hit);
  ASSERT_TRUE(a);
  EXPECT_EQ(Table(m, 2), (Ids{0, 4}));
  EXPECT_FALSE(m.block_pool().is_cached(4));  // same key as block 1: the first one stays
  EXPECT_EQ(Refs(m), (Ids{3, 2, 1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(m.prefix_cache_stats().num_query_tokens, 10 + 11 + 8);
  EXPECT_EQ(m.prefix_cache_stats().num_hit_tokens, 0 + 8 + 4);

  // Freeing gives blocks back tail first; uncached blocks go to the front.
  m.Free(0);
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{2, 5, 6, 7, 8, 9}));
  m.Free(1);
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{3, 2, 5, 6, 7, 8, 9, 1}));
  m.Free(2);
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{4, 3, 2, 5, 6, 7, 8, 9, 1, 0}));
  EXPECT_EQ(Refs(m), Ids(10, 0));
  EXPECT_DOUBLE_EQ(m.Usage(), 0.0);

  // Request 3 revives both cached blocks from the back of the queue.
  const auto t3 = Concat(Range(0, 8), {200});
  hit = m.GetComputedBlocks(t3);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1}));
  a = m.AllocateSlots(R(3, t3, 0), 1, &hit);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{4}));
  EXPECT_EQ(Table(m, 3), (Ids{0, 1, 4}));
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{3, 2, 5, 6, 7, 8, 9}));
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, PressureEvictsTheTailOfAFreedPrefixFirst) {
  KVCacheManager m = Make(4, 2);
  const auto t0 = Range(0, 7);  // blocks [0 1][2 3][4 5][6]
  auto hit = m.GetComputedBlocks(t0);
  ASSERT_TRUE(m.AllocateSlots(R(0, t0, 0), 7, &hit));
  m.Free(0);
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{3, 2, 1, 0}));
  // An unrelated 4-token request takes block 3 (uncached) and then block 2 (the prefix's tail),
  // tabled in ascending order.
  const auto u = Range(50, 4);
  hit = m.GetComputedBlocks(u);
  ASSERT_TRUE(m.AllocateSlots(R(1, u, 0), 4, &hit));
  EXPECT_EQ(Table(m, 1), (Ids{2, 3}));
  EXPECT_EQ(m.block_pool().num_evicted_blocks(), 1);
  // The head of the old prefix still hits.
  const auto t2 = Range(0, 7);
  hit = m.GetComputedBlocks(t2);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1}));
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, ChunkedPrefillThenDecodeCachesBlocksAsTheyFill) {
  KVCacheManager m = Make(8, 4);
  std::vector<int32_t> t = Range(0, 10);
  auto hit = m.GetComputedBlocks(t);
  auto a = m.AllocateSlots(R(0, t, 0), 6, &hit);  // chunk 1: tokens 0..5
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{0, 1}));
  EXPECT_EQ(m.block_pool().num_cached_blocks(), 1);
  a = m.AllocateSlots(R(0, t, 6), 4);  // chunk 2: tokens 6..9
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{2}));
  EXPECT_EQ(m.block_pool().num_cached_blocks(), 2);
  // Decode: the sampled token 10 is appended, then 11 (block 2 fills at token 11).
  t.push_back(10);
  a = m.AllocateSlots(R(0, t, 10), 1);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->new_block_ids.empty());
  t.push_back(11);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 11), 1));
  EXPECT_EQ(m.block_pool().num_cached_blocks(), 3);
  t.push_back(12);
  a = m.AllocateSlots(R(0, t, 12), 1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->new_block_ids, (Ids{3}));
  std::vector<int64_t> slots;
  m.AppendSlotMapping(0, 2, 3, &slots);   // positions 2, 3, 4
  m.AppendSlotMapping(0, 12, 1, &slots);  // position 12: block 3, offset 0
  EXPECT_EQ(slots, (std::vector<int64_t>{2, 3, 4, 12}));
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, ForkSharesBlocksAndCopiesTheLastOnWrite) {
  KVCacheManager m = Make(6, 4);
  std::vector<int32_t> parent = Range(0, 6);  // [0 1 2 3][4 5 _ _]
  auto hit = m.GetComputedBlocks(parent);
  ASSERT_TRUE(m.AllocateSlots(R(0, parent, 0), 6, &hit));
  EXPECT_EQ(Table(m, 0), (Ids{0, 1}));
  m.Fork(0, 1);
  EXPECT_EQ(Table(m, 1), (Ids{0, 1}));
  EXPECT_EQ(Refs(m), (Ids{2, 2, 0, 0, 0, 0}));

  // The child samples token 70 first: block 1 is shared and partial, so it gets a copy.
  std::vector<int32_t> child = Concat(parent, {70});
  auto a = m.AllocateSlots(R(1, child, 6), 1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->copies, (std::vector<BlockCopy>{{1, 2}}));
  EXPECT_TRUE(a->new_block_ids.empty());
  EXPECT_EQ(Table(m, 1), (Ids{0, 2}));
  EXPECT_EQ(Refs(m), (Ids{2, 1, 1, 0, 0, 0}));

  // The parent then writes in place: it is the only holder of block 1 now.
  parent.push_back(60);
  a = m.AllocateSlots(R(0, parent, 6), 1);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->copies.empty());
  EXPECT_EQ(Table(m, 0), (Ids{0, 1}));

  // The full block 0 is never copied: writes past it go to new blocks.
  EXPECT_TRUE(m.TakeReleasedBlocks().empty());
  m.Free(0);
  m.Free(1);
  EXPECT_EQ(Refs(m), Ids(6, 0));
  // Released where no prefix hit reaches them: the partial blocks 1 and 2, not the cached block
  // 0 (the parent's free left it to the child).
  EXPECT_EQ(m.TakeReleasedBlocks(), (Ids{1, 2}));
  EXPECT_TRUE(m.TakeReleasedBlocks().empty());
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, ForkAtABlockBoundaryNeedsNoCopy) {
  KVCacheManager m = Make(6, 4);
  std::vector<int32_t> t = Range(0, 8);
  auto hit = m.GetComputedBlocks(t);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 8, &hit));
  m.Fork(0, 1);
  t.push_back(9);
  auto a = m.AllocateSlots(R(1, t, 8), 1);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->copies.empty());
  EXPECT_EQ(a->new_block_ids, (Ids{2}));
  EXPECT_EQ(Table(m, 1), (Ids{0, 1, 2}));
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, OutOfBlocksReturnsNulloptAndChangesNothing) {
  KVCacheManager m = Make(3, 4);
  const auto t = Range(0, 9);
  auto hit = m.GetComputedBlocks(t);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 9, &hit));  // 3 blocks: the pool is full
  m.Fork(0, 1);
  std::vector<int32_t> child = Concat(t, {5});
  EXPECT_FALSE(m.AllocateSlots(R(1, child, 9), 1).has_value());  // the copy needs a block
  EXPECT_EQ(Table(m, 1), (Ids{0, 1, 2}));
  EXPECT_EQ(Refs(m), (Ids{2, 2, 2}));
  const auto other = Range(100, 4);
  hit = m.GetComputedBlocks(other);
  EXPECT_FALSE(m.AllocateSlots(R(2, other, 0), 4, &hit).has_value());
  EXPECT_FALSE(m.HasRequest(2));
  m.Free(1);
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, HitBlocksInTheFreeQueueAreCountedAgainstTheBudget) {
  KVCacheManager m = Make(3, 2);
  const auto t = Range(0, 5);  // [0 1][2 3][4]
  auto hit = m.GetComputedBlocks(t);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 5, &hit));
  m.Free(0);  // queue: 2, 1, 0 with 0 and 1 cached
  const auto t1 = Concat(Range(0, 4), {9, 9, 9});  // hit 2 blocks, needs 2 more: 4 > 3
  hit = m.GetComputedBlocks(t1);
  ASSERT_EQ(hit.block_ids, (Ids{0, 1}));
  EXPECT_FALSE(m.AllocateSlots(R(1, t1, 0), 3, &hit).has_value());
  EXPECT_EQ(m.block_pool().FreeQueueOrder(), (Ids{2, 1, 0}));
  EXPECT_TRUE(m.block_pool().is_cached(1));
  m.CheckInvariants();
}

TEST(KVCacheManagerTest, CacheSaltSeparatesTenants) {
  KVCacheManager m = Make(8, 4);
  const auto t = Range(0, 9);
  auto hit = m.GetComputedBlocks(t, "tenant-a");
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0, "tenant-a"), 9, &hit));
  EXPECT_TRUE(m.GetComputedBlocks(t, "tenant-b").block_ids.empty());
  EXPECT_TRUE(m.GetComputedBlocks(t).block_ids.empty());
  EXPECT_EQ(m.GetComputedBlocks(t, "tenant-a").block_ids, (Ids{0, 1}));
}

TEST(KVCacheManagerTest, XxhashFindsTheSamePrefixes) {
  KVCacheManager m({8, 4, true, PrefixHashAlgo::kXxh3_128});
  const auto t = Range(0, 9);
  auto hit = m.GetComputedBlocks(t);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 9, &hit));
  EXPECT_EQ(m.GetComputedBlocks(t).block_ids, (Ids{0, 1}));
}

TEST(KVCacheManagerTest, PrefixCachingDisabledNeverHits) {
  KVCacheManager m = Make(8, 4, /*caching=*/false);
  const auto t = Range(0, 9);
  auto hit = m.GetComputedBlocks(t);
  ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 9, &hit));
  m.Free(0);
  EXPECT_TRUE(m.GetComputedBlocks(t).block_ids.empty());
  EXPECT_EQ(m.block_pool().num_cached_blocks(), 0);
  EXPECT_EQ(m.prefix_cache_stats().num_requests, 0);
}

TEST(KVCacheManagerTest, BlockSizeOneAndTwoFiftySix) {
  for (int32_t bs : {1, 256}) {
    KVCacheManager m = Make(4, bs);
    const auto t = Range(0, 2 * bs + 1);
    auto hit = m.GetComputedBlocks(t);
    ASSERT_TRUE(m.AllocateSlots(R(0, t, 0), 2 * bs + 1, &hit));
    EXPECT_EQ(Table(m, 0), (Ids{0, 1, 2}));
    hit = m.GetComputedBlocks(t);
    EXPECT_EQ(hit.num_computed_tokens, 2 * bs);
    std::vector<int64_t> slots;
    m.AppendSlotMapping(0, 2 * bs, 1, &slots);
    EXPECT_EQ(slots, (std::vector<int64_t>{2 * bs}));
    m.CheckInvariants();
  }
}

TEST(KVCacheManagerTest, SlotMappingFollowsTheBlockTable) {
  std::vector<int64_t> slots;
  AppendSlotMapping(Ids{7, 3}, 4, 2, 4, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{30, 31, 12, 13}));
}

TEST(KVCacheManagerTest, ValidBlockSizes) {
  for (int b = 0; b <= 300; ++b) {
    const bool pow2 = b == 1 || b == 2 || b == 4 || b == 8 || b == 16 || b == 32 || b == 64 ||
                      b == 128 || b == 256;
    EXPECT_EQ(IsValidBlockSize(b), pow2) << b;
  }
}

}  // namespace
}  // namespace pagoda
