// KVCacheManager: each request's block table on top of a BlockPool, with automatic prefix
// caching and copy-on-write forks (vLLM V1's KVCacheManager; nano-vllm's BlockManager).
// Bookkeeping only: it hands out block ids and says which block copies the backend must
// make; the K/V bytes live with the backend as, per layer,
//   K, V: [num_blocks, block_size, num_kv_heads, head_dim]
// so a block id names the same slot in every layer.
//
// How the scheduler drives it (vLLM V1: no prefill/decode phases, only
// num_computed_tokens catching up with the request's tokens):
//
//   new request:   hit = GetComputedBlocks(prompt, cache_salt);      // read-only lookup
//                  a = AllocateSlots({id, tokens, 0, cache_salt}, n, &hit);
//                  if (!a) leave it waiting;  else num_computed_tokens = hit.num_computed_tokens
//   each step:     a = AllocateSlots({id, tokens, num_computed_tokens}, n);  // chunk or 1
//                  if (!a) preempt (Free the newest request, requeue it: recompute)
//                  backend: copy every a->copies[i] block, then run the model with
//                  GetBlockIds(id) and SlotMapping(id, num_computed_tokens, n)
//                  after the step: num_computed_tokens += n
//   parallel sampling: Fork(parent, child) after the prompt's prefill
//   finished / aborted / preempted:  Free(id)   (full blocks stay cached for reuse)
//
// AllocateSlots, in blocks of the request's table:
//
//   | < hit blocks > | < computed > | < new tokens > |
//   | (touched)      | [ last block ][ ... new blocks ... ]
//                      ^ written this step: if shared (ref_cnt > 1, after Fork) it is
//                        swapped for a fresh block first, and (src, dst) reported
//   after allocation, every block all of whose tokens are known and scheduled is cached
//   under its chain hash (vLLM caches at allocation time: the K/V land in this step).
//
// Invariants (CheckInvariants):
//   - for every block b: pool.ref_cnt(b) == number of request tables holding b;
//   - a table never holds a block twice;
//   - a request's table covers at least the slots allocated to it;
//   - a block that a request writes into has ref_cnt 1 (copy-on-write).
// Failure: not enough free blocks is a normal outcome (AllocateSlots returns nullopt and
// changes nothing); misuse (unknown request, double Fork target) aborts via PAGODA_CHECK.
// Not thread-safe: the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace pagoda {

struct KVCacheManagerConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // a power of two in [1, 256]
  bool enable_prefix_caching = true;
  PrefixHashAlgo hash_algo = PrefixHashAlgo::kSha256;
};

// What the manager needs to know of a request; the caller (the scheduler's Request) owns it
// and the views need to outlive the call only: {id, tokens, num_computed_tokens} or
// {id, tokens, num_computed_tokens, cache_salt}.
struct KVRequest {
  int64_t request_id = 0;
  // Every known token: the prompt, then the outputs so far. Must cover the tokens being
  // scheduled (token_ids.size() >= num_computed_tokens + num_new_tokens).
  std::span<const int32_t> token_ids = {};
  // Tokens whose K/V are already in the request's blocks, before this call (0 for a new
  // request: the prefix hit is passed separately as new_computed_blocks).
  int64_t num_computed_tokens = 0;
  // Per-request extra hash keys (a cache_salt); read on the first allocation only.
  std::string_view extra_keys = {};
};

// A prefix-cache hit: full blocks, never the whole prompt.
struct ComputedBlocks {
  std::vector<int32_t> block_ids;     // the cached blocks, in prefix order
  std::vector<BlockHash> block_hashes;  // their keys
  int64_t num_computed_tokens = 0;    // block_ids.size() * block_size
};

// A block copy the backend performs (all layers, K and V) before the step's forward.
struct BlockCopy {
  int32_t src_block_id;
  int32_t dst_block_id;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct SlotAllocation {
  std::vector<int32_t> new_block_ids;  // blocks appended to the table by this call
  std::vector<BlockCopy> copies;       // copy-on-write copies to make first
};

class KVCacheManager {
 public:
  // REQUIRES: config.num_blocks >= 0; block_size a power of two in [1, 256].
  explicit KVCacheManager(const KVCacheManagerConfig& config);

  int32_t block_size() const { return pool_.block_size(); }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  bool enable_prefix_caching() const { return config_.enable_prefix_caching; }

  // Longest cached prefix of FULL blocks of a new request's tokens (a preempted request being
  // re-admitted passes its prompt and outputs so far). At least the last token is left to
  // compute so that the step produces logits (vLLM: at most (len - 1) / block_size blocks).
  // Empty when caching is off. Changes no reference count; counts the lookup in
  // prefix_cache_stats() (queries: the tokens passed; hits: the hit tokens).
  ComputedBlocks GetComputedBlocks(std::span<const int32_t> prompt_token_ids,
                                   std::string_view extra_keys = {});

  // Makes room for `num_new_tokens` more tokens at positions
  //   [num_computed_tokens + hit, num_computed_tokens + hit + num_new_tokens)
  // of request.request_id (creating its table on the first call), taking the prefix hit
  // `new_computed_blocks` (first call only, from GetComputedBlocks on the same tokens).
  // Returns the new blocks and copy-on-write copies, or nullopt, with nothing changed,
  // when the pool cannot supply the blocks.
  // REQUIRES: num_new_tokens >= 0; token_ids cover the scheduled tokens;
  //           new_computed_blocks non-empty only for a request with no table yet.
  std::optional<SlotAllocation> AllocateSlots(const KVRequest& request, int64_t num_new_tokens,
                                              const ComputedBlocks* new_computed_blocks = nullptr);

  // Gives `child_request_id` the parent's table: every block gains a reference. Blocks are
  // copied lazily: the first of the two to write into the shared last block gets a copy.
  // REQUIRES: the parent exists, the child does not.
  void Fork(int64_t parent_request_id, int64_t child_request_id);

  // Releases the request's blocks tail first (so the end of its prefix is evicted before
  // the start) and forgets it. No-op for an unknown id (a request that never got blocks).
  void Free(int64_t request_id);
  // The blocks Free has released since the last call that no request holds and no prefix hit
  // can reach (reference count 0, no hash: partial blocks, duplicates, caching off), oldest
  // first. Their bytes are dead until a new owner writes them from offset 0, so a backend may
  // drop what it keeps beside them (KVCache::ReleaseBlocks: the side pool's wide copies).
  std::vector<int32_t> TakeReleasedBlocks();

  bool HasRequest(int64_t request_id) const { return requests_.count(request_id) != 0; }
  // The request's block table. REQUIRES: HasRequest(request_id).
  std::span<const int32_t> GetBlockIds(int64_t request_id) const;
  // Appends the slot of each position in [start_pos, start_pos + num_tokens) to `out`
  // (slot = block_id * block_size + pos % block_size). REQUIRES: the table covers them.
  void AppendSlotMapping(int64_t request_id, int64_t start_pos, int64_t num_tokens,
                         std::vector<int64_t>* out) const;

  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  int32_t num_used_blocks() const { return pool_.num_used_blocks(); }
  int64_t num_requests() const { return static_cast<int64_t>(requests_.size()); }
  double Usage() const { return pool_.Usage(); }  // pagoda_kv_cache_usage_perc
  const PrefixCacheStats& prefix_cache_stats() const { return pool_.prefix_cache_stats(); }
  bool ResetPrefixCache() { return pool_.ResetPrefixCache(); }
  const BlockPool& block_pool() const { return pool_; }

  // Aborts (PAGODA_CHECK) when an invariant above is broken. O(num_blocks + table sizes).
  void CheckInvariants() const;

 private:
  struct RequestBlocks {
    std::vector<int32_t> block_ids;
    std::vector<BlockHash> block_hashes;  // keys of the first block_hashes.size() full blocks
    int64_t num_cached_blocks = 0;         // leading blocks already registered in the pool
    std::string extra_keys;
  };

  void CacheFullBlocks(RequestBlocks* r, std::span<const int32_t> token_ids,
                       int64_t num_tokens);

  KVCacheManagerConfig config_;
  BlockPool pool_;
  std::unordered_map<int64_t, RequestBlocks> requests_;
  std::vector<int32_t> released_;
};

// slot = block_table[pos / block_size] * block_size + pos % block_size, appended to `out`
// for each pos in [start_pos, start_pos + num_tokens). The model runner's slot mapping.
// REQUIRES: the table covers the positions.
void AppendSlotMapping(std::span<const int32_t> block_table, int32_t block_size,
                       int64_t start_pos, int64_t num_tokens, std::vector<int64_t>* out);

// True for the block sizes pagoda supports: powers of two from 1 to 256.
bool IsValidBlockSize(int64_t block_size);

}  // namespace pagoda
