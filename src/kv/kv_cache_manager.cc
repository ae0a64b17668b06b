#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

bool IsValidBlockSize(int64_t block_size) {
  return block_size >= 1 && block_size <= 256 && (block_size & (block_size - 1)) == 0;
}

void AppendSlotMapping(std::span<const int32_t> block_table, int32_t block_size,
                       int64_t start_pos, int64_t num_tokens, std::vector<int64_t>* out) {
  PAGODA_CHECK(start_pos >= 0 && num_tokens >= 0) << "positions " << start_pos << "+"
                                                  << num_tokens;
  PAGODA_CHECK(start_pos + num_tokens <= static_cast<int64_t>(block_table.size()) * block_size)
      << "positions up to " << start_pos + num_tokens << " beyond a table of "
      << block_table.size() << " blocks of " << block_size;
  out->reserve(out->size() + num_tokens);
  for (int64_t pos = start_pos; pos < start_pos + num_tokens; ++pos) {
    out->push_back(static_cast<int64_t>(block_table[pos / block_size]) * block_size +
                   pos % block_size);
  }
}

KVCacheManager::KVCacheManager(const KVCacheManagerConfig& config)
    : config_(config),
      pool_(config.num_blocks, config.block_size, config.enable_prefix_caching) {
  PAGODA_CHECK(IsValidBlockSize(config.block_size))
      << "block_size " << config.block_size << " is not a power of two in [1, 256]";
}

ComputedBlocks KVCacheManager::GetComputedBlocks(std::span<const int32_t> prompt_token_ids,
                                                 std::string_view extra_keys) {
  ComputedBlocks out;
  if (!config_.enable_prefix_caching) return out;
  const int64_t bs = block_size();
  const int64_t num_tokens = static_cast<int64_t>(prompt_token_ids.size());
  // Never the whole prompt: the last token is recomputed so the step has its logits.
  const int64_t max_hit_blocks = num_tokens > 0 ? (num_tokens - 1) / bs : 0;
  // Hash block by block and stop at the first miss: a long uncached prompt costs one
  // hash, not (len / block_size).
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    const auto tokens = prompt_token_ids.subspan(i * bs, bs);
    const BlockHash h = HashBlockTokens(config_.hash_algo,
                                        i == 0 ? nullptr : &out.block_hashes.back(), tokens,
                                        i == 0 ? extra_keys : std::string_view());
    const std::optional<int32_t> b = pool_.GetCachedBlock(h, tokens);
    if (!b) break;
    out.block_ids.push_back(*b);
    out.block_hashes.push_back(h);
  }
  out.num_computed_tokens = static_cast<int64_t>(out.block_ids.size()) * bs;
  pool_.RecordPrefixCacheQuery(num_tokens, out.num_computed_tokens);
  return out;
}

std::optional<SlotAllocation> KVCacheManager::AllocateSlots(
    const KVRequest& request, int64_t num_new_tokens, const ComputedBlocks* new_computed_blocks) {
  PAGODA_CHECK(num_new_tokens >= 0) << "request " << request.request_id << ": num_new_tokens "
                                    << num_new_tokens;
  const int64_t bs = block_size();
  auto it = requests_.find(request.request_id);
  const std::vector<int32_t>* table = it == requests_.end() ? nullptr : &it->second.block_ids;
  const int64_t num_table_blocks = table ? static_cast<int64_t>(table->size()) : 0;

  std::span<const int32_t> hit_ids;
  if (new_computed_blocks != nullptr && !new_computed_blocks->block_ids.empty()) {
    PAGODA_CHECK(num_table_blocks == 0 && request.num_computed_tokens == 0)
        << "request " << request.request_id << ": a prefix hit is only taken at admission";
    hit_ids = new_computed_blocks->block_ids;
  }
  const int64_t num_hit_tokens = static_cast<int64_t>(hit_ids.size()) * bs;
  const int64_t num_computed = request.num_computed_tokens + num_hit_tokens;
  const int64_t num_needed_tokens = num_computed + num_new_tokens;
  PAGODA_CHECK(num_needed_tokens <= static_cast<int64_t>(request.token_ids.size()))
      << "request " << request.request_id << ": scheduling up to token " << num_needed_tokens
      << " of " << request.token_ids.size() << " known";
  const int64_t num_have = num_table_blocks + static_cast<int64_t>(hit_ids.size());
  const int64_t num_required = (num_needed_tokens + bs - 1) / bs;
  const int64_t num_new_blocks = std::max<int64_t>(0, num_required - num_have);

  // Blocks of the existing table written this step that another request still holds:
  // they need a private copy first (copy-on-write after Fork).
  std::vector<int64_t> cow_indices;
  if (num_new_tokens > 0 && table != nullptr) {
    const int64_t first = num_computed / bs;
    const int64_t last = std::min(num_table_blocks, num_required);
    for (int64_t i = first; i < last; ++i) {
      if (pool_.ref_cnt((*table)[i]) > 1) cow_indices.push_back(i);
    }
  }
  // Hit blocks sitting in the free queue stop being allocatable once touched.
  int64_t num_evictable_hits = 0;
  for (int32_t b : hit_ids) num_evictable_hits += pool_.ref_cnt(b) == 0;
  const int64_t num_blocks_to_take =
      num_new_blocks + static_cast<int64_t>(cow_indices.size()) + num_evictable_hits;
  if (num_blocks_to_take > pool_.num_free_blocks()) return std::nullopt;

  // Commit: nothing below can fail.
  RequestBlocks& r = it != requests_.end() ? it->second : requests_[request.request_id];
  if (it == requests_.end()) r.extra_keys = std::string(request.extra_keys);
  SlotAllocation out;
  if (!hit_ids.empty()) {
    // Touch before allocating, so the allocation cannot evict a block we are reusing.
    pool_.Touch(hit_ids);
    r.block_ids.assign(hit_ids.begin(), hit_ids.end());
    r.block_hashes = new_computed_blocks->block_hashes;
    r.num_cached_blocks = static_cast<int64_t>(hit_ids.size());
  }
  for (int64_t i : cow_indices) {
    const int32_t src = r.block_ids[i];
    const int32_t dst = (*pool_.AllocateBlocks(1))[0];
    // Only tokens before num_computed hold K/V worth copying.
    if (i * bs < num_computed) out.copies.push_back({src, dst});
    pool_.FreeBlocks(std::span<const int32_t>(&src, 1));  // still held by the other owner
    r.block_ids[i] = dst;
  }
  if (num_new_blocks > 0) {
    out.new_block_ids = *pool_.AllocateBlocks(static_cast<int32_t>(num_new_blocks));
    // Ascending: blocks freed tail first come back from the queue in descending runs, and a
    // request's blocks in consecutive ascending slots let the GPU prefill copy a 64-key tile of
    // them as one TMA box (kernels/cuda/flash_wgmma.cu). The queue alone decides which blocks
    // are taken; only their order in the table changes.
    std::sort(out.new_block_ids.begin(), out.new_block_ids.end());
    r.block_ids.insert(r.block_ids.end(), out.new_block_ids.begin(), out.new_block_ids.end());
  }
  if (config_.enable_prefix_caching) CacheFullBlocks(&r, request.token_ids, num_needed_tokens);
  return out;
}

void KVCacheManager::CacheFullBlocks(RequestBlocks* r, std::span<const int32_t> token_ids,
                                     int64_t num_tokens) {
  const int64_t bs = block_size();
  const int64_t num_full = num_tokens / bs;
  if (num_full <= r->num_cached_blocks) return;
  ComputeBlockHashes(config_.hash_algo, token_ids, block_size(), r->extra_keys, num_full,
                     &r->block_hashes);
  for (int64_t i = r->num_cached_blocks; i < num_full; ++i) {
    pool_.CacheFullBlock(r->block_ids[i], r->block_hashes[i], token_ids.subspan(i * bs, bs));
  }
  r->num_cached_blocks = num_full;
}

void KVCacheManager::Fork(int64_t parent_request_id, int64_t child_request_id) {
  auto parent = requests_.find(parent_request_id);
  PAGODA_CHECK(parent != requests_.end()) << "Fork: unknown parent request " << parent_request_id;
  PAGODA_CHECK(!requests_.count(child_request_id))
      << "Fork: request " << child_request_id << " already has blocks";
  RequestBlocks child = parent->second;  // copy before the insert may rehash
  pool_.Touch(child.block_ids);
  requests_.emplace(child_request_id, std::move(child));
}

void KVCacheManager::Free(int64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<int32_t>& ids = it->second.block_ids;
  std::reverse(ids.begin(), ids.end());  // tail first: see BlockPool's eviction order
  pool_.FreeBlocks(ids);
  for (const int32_t b : ids) {
    if (pool_.ref_cnt(b) == 0 && !pool_.is_cached(b)) released_.push_back(b);
  }
  requests_.erase(it);
}

std::vector<int32_t> KVCacheManager::TakeReleasedBlocks() {
  std::vector<int32_t> out;
  out.swap(released_);
  return out;
}

std::span<const int32_t> KVCacheManager::GetBlockIds(int64_t request_id) const {
  auto it = requests_.find(request_id);
  PAGODA_CHECK(it != requests_.end()) << "unknown request " << request_id;
  return it->second.block_ids;
}

void KVCacheManager::AppendSlotMapping(int64_t request_id, int64_t start_pos, int64_t num_tokens,
                                       std::vector<int64_t>* out) const {
  pagoda::AppendSlotMapping(GetBlockIds(request_id), block_size(), start_pos, num_tokens, out);
}

void KVCacheManager::CheckInvariants() const {
  pool_.CheckInvariants();
  std::vector<int32_t> holders(num_blocks(), 0);
  std::vector<int64_t> last_seen(num_blocks(), -1);  // index of the last table holding b
  int64_t k = 0;
  for (const auto& [id, r] : requests_) {
    ++k;
    PAGODA_CHECK(r.num_cached_blocks <= static_cast<int64_t>(r.block_ids.size()))
        << "request " << id << " caches more blocks than it holds";
    for (int32_t b : r.block_ids) {
      PAGODA_CHECK(b >= 0 && b < num_blocks()) << "request " << id << " holds block " << b;
      PAGODA_CHECK(last_seen[b] != k) << "request " << id << " holds block " << b << " twice";
      last_seen[b] = k;
      ++holders[b];
    }
  }
  for (int32_t b = 0; b < num_blocks(); ++b) {
    PAGODA_CHECK(holders[b] == pool_.ref_cnt(b))
        << "block " << b << ": " << holders[b] << " holders but ref_cnt " << pool_.ref_cnt(b);
  }
}

}  // namespace pagoda
