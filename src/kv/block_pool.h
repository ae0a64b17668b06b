// BlockPool: the KV cache's block ids, their reference counts, the free queue and the
// prefix cache (vLLM V1's BlockPool). Bookkeeping only: the K/V bytes live with the
// backend, indexed by the same block ids (a block id is the same slot in every layer).
//
// A block is in exactly one of three states:
//
//   in use     ref_cnt > 0, not in the free queue; maybe cached (has a hash) if full
//   cached     ref_cnt == 0, in the free queue, has a hash: its K/V can still be reused
//              by a prefix hit (Touch) until it is evicted
//   free       ref_cnt == 0, in the free queue, no hash
//
// Eviction order. AllocateBlocks pops the free queue's front. FreeBlocks queues a block
// whose ref_cnt drops to zero at the BACK if it is cached (LRU: reused last) and at the
// FRONT if it holds nothing reusable (no hash: reusing it costs nothing). Callers free a
// request's blocks tail first (KVCacheManager::Free does), so among cached blocks the end of
// a prefix is evicted before its start, and a later request sharing only the start still
// hits. (vLLM appends every freed block; putting hash-less blocks first keeps more of the
// cache alive at no cost.)
//
// Invariants (CheckInvariants verifies them, O(num_blocks)):
//   - ref_cnt(b) >= 0; b is in the free queue iff ref_cnt(b) == 0;
//   - the hash -> block map and the blocks' hashes agree: map[h] == b iff block_hash(b) == h;
//   - a cached block is full: its block_size token ids are stored for the collision check.
// Failure: running out of blocks is a normal outcome (nullopt), never an exception.
// Misuse (freeing a free block, a bad id) is a bug and aborts through PAGODA_CHECK.
// Not thread-safe: owned by one KVCacheManager, driven by the scheduler thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/free_block_queue.h"

namespace pagoda {

// Prefix-cache counters, in tokens (pagoda_prefix_cache_{queries,hits}_total).
struct PrefixCacheStats {
  int64_t num_requests = 0;      // lookups made
  int64_t num_query_tokens = 0;  // prompt tokens looked up
  int64_t num_hit_tokens = 0;    // of those, found in the cache
  double HitRate() const {
    return num_query_tokens == 0 ? 0.0 : static_cast<double>(num_hit_tokens) / num_query_tokens;
  }
};

class BlockPool {
 public:
  // All blocks start free, in id order. REQUIRES: num_blocks >= 0, block_size >= 1.
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  bool enable_caching() const { return enable_caching_; }

  // Blocks an allocation can take now: free plus cached-but-unreferenced ones.
  int32_t num_free_blocks() const { return free_queue_.num_free_blocks(); }
  int32_t num_used_blocks() const { return num_blocks_ - num_free_blocks(); }
  // Blocks holding a prefix hash (in use or not).
  int64_t num_cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  // Cached blocks whose hash was dropped to reuse them, since construction.
  int64_t num_evicted_blocks() const { return num_evicted_blocks_; }
  // Blocks in use / all blocks, in [0, 1]; cached blocks no request holds count as free
  // (pagoda_kv_cache_usage_perc). 0 for an empty pool.
  double Usage() const;

  // Takes `n` blocks from the front of the free queue, each with ref_cnt 1; a cached block
  // taken this way is evicted (loses its hash). nullopt, and nothing changes, when fewer
  // than n blocks are free.
  std::optional<std::vector<int32_t>> AllocateBlocks(int32_t n);

  // Drops one reference from each block, in the given order; a block reaching zero is
  // queued (see "Eviction order"). Pass a request's blocks tail first.
  // REQUIRES: ref_cnt(b) > 0 for each b.
  void FreeBlocks(std::span<const int32_t> ordered_block_ids);

  // Adds one reference to each block; a block with ref_cnt 0 (a cache hit on a block in
  // the free queue) leaves the queue: vLLM's touch.
  void Touch(std::span<const int32_t> block_ids);

  // The block cached under `hash` whose token ids equal `block_token_ids`, or nullopt.
  // Does not change any reference count.
  std::optional<int32_t> GetCachedBlock(const BlockHash& hash,
                                        std::span<const int32_t> block_token_ids) const;

  // Registers a full, in-use block under `hash`. No-op when caching is disabled, when the
  // block already carries this hash, or when another block already holds the hash (this
  // one then stays uncached and is simply freed later).
  // REQUIRES: ref_cnt(block_id) > 0; block_token_ids.size() == block_size; the block has
  // no other hash.
  void CacheFullBlock(int32_t block_id, const BlockHash& hash,
                      std::span<const int32_t> block_token_ids);

  // Drops every prefix hash. Only when no block is in use (vLLM's reset_prefix_cache);
  // returns false and changes nothing otherwise.
  bool ResetPrefixCache();

  void RecordPrefixCacheQuery(int64_t num_query_tokens, int64_t num_hit_tokens);
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }

  int32_t ref_cnt(int32_t block_id) const { return ref_cnt_[block_id]; }
  bool is_cached(int32_t block_id) const { return has_hash_[block_id] != 0; }
  // REQUIRES: is_cached(block_id).
  const BlockHash& block_hash(int32_t block_id) const { return block_hash_[block_id]; }
  bool IsInFreeQueue(int32_t block_id) const { return free_queue_.Contains(block_id); }
  // Free-queue order, front (next evicted) first. O(n); for tests and debugging.
  std::vector<int32_t> FreeQueueOrder() const { return free_queue_.ToVector(); }

  // Aborts (PAGODA_CHECK) if an invariant above is broken. O(num_blocks); for tests.
  void CheckInvariants() const;

 private:
  void EvictHash(int32_t block_id);

  int32_t num_blocks_;
  int32_t block_size_;
  bool enable_caching_;
  FreeBlockQueue free_queue_;
  std::vector<int32_t> ref_cnt_;      // [num_blocks]
  std::vector<uint8_t> has_hash_;     // [num_blocks]
  std::vector<BlockHash> block_hash_; // [num_blocks], meaningful where has_hash_
  std::vector<int32_t> block_tokens_; // [num_blocks * block_size] when caching: for hit checks
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;  // hash -> block id
  int64_t num_evicted_blocks_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace pagoda
