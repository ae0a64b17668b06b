#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>

namespace pagoda {
namespace {

using Ids = std::vector<int32_t>;

std::vector<int32_t> Tokens(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

BlockHash Key(int32_t first, int32_t n) {
  return HashBlockTokens(PrefixHashAlgo::kSha256, nullptr, Tokens(first, n), "");
}

TEST(BlockPoolTest, AllocatesFromTheFrontAndFailsWithoutSideEffects) {
  BlockPool pool(4, 2, /*enable_caching=*/true);
  EXPECT_EQ(*pool.AllocateBlocks(3), (Ids{0, 1, 2}));
  EXPECT_EQ(pool.ref_cnt(0), 1);
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{3}));
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.75);
  EXPECT_FALSE(pool.AllocateBlocks(2).has_value());  // only one free: nothing changes
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{3}));
  EXPECT_EQ(*pool.AllocateBlocks(0), Ids{});
  pool.CheckInvariants();
}

TEST(BlockPoolTest, CachedBlocksQueueAtTheBackUncachedAtTheFront) {
  BlockPool pool(5, 2, true);
  const Ids held = *pool.AllocateBlocks(3);  // 0 1 2
  pool.CacheFullBlock(0, Key(0, 2), Tokens(0, 2));
  pool.CacheFullBlock(1, Key(2, 2), Tokens(2, 2));
  // A request frees tail first: 2 (partial, no hash), then 1, then 0.
  pool.FreeBlocks(Ids{2, 1, 0});
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{2, 3, 4, 1, 0}));
  EXPECT_EQ(pool.num_free_blocks(), 5);
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.0);  // cached but unreferenced counts as free
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  pool.CheckInvariants();
}

TEST(BlockPoolTest, EvictsTailOfPrefixFirst) {
  BlockPool pool(3, 2, true);
  pool.AllocateBlocks(3);
  pool.CacheFullBlock(0, Key(0, 2), Tokens(0, 2));  // prefix head
  pool.CacheFullBlock(1, Key(2, 2), Tokens(2, 2));
  pool.CacheFullBlock(2, Key(4, 2), Tokens(4, 2));  // prefix tail
  pool.FreeBlocks(Ids{2, 1, 0});
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{2, 1, 0}));
  EXPECT_EQ(*pool.AllocateBlocks(1), Ids{2});  // the tail goes first and loses its hash
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.num_evicted_blocks(), 1);
  EXPECT_FALSE(pool.GetCachedBlock(Key(4, 2), Tokens(4, 2)).has_value());
  EXPECT_EQ(*pool.GetCachedBlock(Key(0, 2), Tokens(0, 2)), 0);  // the head still hits
  pool.CheckInvariants();
}

TEST(BlockPoolTest, TouchRevivesACachedBlockFromTheMiddleOfTheQueue) {
  BlockPool pool(4, 2, true);
  pool.AllocateBlocks(2);
  pool.CacheFullBlock(1, Key(0, 2), Tokens(0, 2));
  pool.FreeBlocks(Ids{1, 0});
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{0, 2, 3, 1}));
  pool.Touch(Ids{1});
  EXPECT_EQ(pool.ref_cnt(1), 1);
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{0, 2, 3}));
  pool.Touch(Ids{1});  // a second holder: no queue change
  EXPECT_EQ(pool.ref_cnt(1), 2);
  pool.FreeBlocks(Ids{1});
  EXPECT_EQ(pool.ref_cnt(1), 1);
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{0, 2, 3}));
  pool.CheckInvariants();
}

TEST(BlockPoolTest, HitComparesTokensSoACollisionIsAMiss) {
  BlockPool pool(2, 2, true);
  pool.AllocateBlocks(1);
  const BlockHash h = Key(0, 2);
  pool.CacheFullBlock(0, h, Tokens(0, 2));
  EXPECT_EQ(*pool.GetCachedBlock(h, Tokens(0, 2)), 0);
  EXPECT_FALSE(pool.GetCachedBlock(h, Tokens(7, 2)).has_value());  // same key, other tokens
}

TEST(BlockPoolTest, DuplicateKeyKeepsTheFirstBlock) {
  BlockPool pool(2, 2, true);
  pool.AllocateBlocks(2);
  pool.CacheFullBlock(0, Key(0, 2), Tokens(0, 2));
  pool.CacheFullBlock(1, Key(0, 2), Tokens(0, 2));
  EXPECT_TRUE(pool.is_cached(0));
  EXPECT_FALSE(pool.is_cached(1));
  pool.FreeBlocks(Ids{1, 0});
  EXPECT_EQ(pool.FreeQueueOrder(), (Ids{1, 0}));
  pool.CheckInvariants();
}

TEST(BlockPoolTest, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(2, 2, true);
  pool.AllocateBlocks(1);
  pool.CacheFullBlock(0, Key(0, 2), Tokens(0, 2));
  EXPECT_FALSE(pool.ResetPrefixCache());
  pool.FreeBlocks(Ids{0});
  EXPECT_TRUE(pool.ResetPrefixCache());
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_FALSE(pool.GetCachedBlock(Key(0, 2), Tokens(0, 2)).has_value());
  pool.CheckInvariants();
}

TEST(BlockPoolTest, CachingDisabledCachesNothing) {
  BlockPool pool(2, 2, false);
  pool.AllocateBlocks(1);
  pool.CacheFullBlock(0, Key(0, 2), Tokens(0, 2));
  EXPECT_FALSE(pool.is_cached(0));
  EXPECT_FALSE(pool.GetCachedBlock(Key(0, 2), Tokens(0, 2)).has_value());
}

TEST(BlockPoolTest, CountsPrefixCacheQueries) {
  BlockPool pool(1, 1, true);
  pool.RecordPrefixCacheQuery(10, 4);
  pool.RecordPrefixCacheQuery(6, 0);
  EXPECT_EQ(pool.prefix_cache_stats().num_requests, 2);
  EXPECT_EQ(pool.prefix_cache_stats().num_query_tokens, 16);
  EXPECT_EQ(pool.prefix_cache_stats().num_hit_tokens, 4);
  EXPECT_DOUBLE_EQ(pool.prefix_cache_stats().HitRate(), 0.25);
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(2, 2, true);
  pool.AllocateBlocks(1);
  pool.FreeBlocks(Ids{0});
  EXPECT_DEATH(pool.FreeBlocks(Ids{0}), "double free of block 0");
}

}  // namespace
}  // namespace pagoda
