#include "kv/block_pool.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      enable_caching_(enable_caching),
      free_queue_(num_blocks),
      ref_cnt_(num_blocks, 0),
      has_hash_(num_blocks, 0),
      block_hash_(enable_caching ? num_blocks : 0) {
  PAGODA_CHECK(block_size >= 1) << "block_size " << block_size;
  if (enable_caching) block_tokens_.resize(static_cast<size_t>(num_blocks) * block_size);
}

double BlockPool::Usage() const {
  if (num_blocks_ == 0) return 0.0;
  return static_cast<double>(num_used_blocks()) / num_blocks_;
}

void BlockPool::EvictHash(int32_t block_id) {
  auto it = cached_.find(block_hash_[block_id]);
  PAGODA_CHECK(it != cached_.end() && it->second == block_id)
      << "block " << block_id << " has a hash the cache map does not point back from";
  cached_.erase(it);
  has_hash_[block_id] = 0;
  ++num_evicted_blocks_;
}

std::optional<std::vector<int32_t>> BlockPool::AllocateBlocks(int32_t n) {
  PAGODA_CHECK(n >= 0) << "n " << n;
  if (n > free_queue_.num_free_blocks()) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = *free_queue_.PopFront();
    PAGODA_DCHECK(ref_cnt_[b] == 0) << "free block " << b << " has references";
    if (has_hash_[b]) EvictHash(b);
    ref_cnt_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::FreeBlocks(std::span<const int32_t> ordered_block_ids) {
  for (int32_t b : ordered_block_ids) {
    PAGODA_CHECK(b >= 0 && b < num_blocks_) << "block id " << b;
    PAGODA_CHECK(ref_cnt_[b] > 0) << "double free of block " << b;
    if (--ref_cnt_[b] == 0) {
      if (has_hash_[b]) {
        free_queue_.Append(b);
      } else {
        free_queue_.Prepend(b);
      }
    }
  }
}

void BlockPool::Touch(std::span<const int32_t> block_ids) {
  for (int32_t b : block_ids) {
    PAGODA_CHECK(b >= 0 && b < num_blocks_) << "block id " << b;
    if (ref_cnt_[b] == 0) free_queue_.Remove(b);
    ++ref_cnt_[b];
  }
}

std::optional<int32_t> BlockPool::GetCachedBlock(const BlockHash& hash,
                                                 std::span<const int32_t> block_token_ids) const {
  if (!enable_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const int32_t b = it->second;
  // A hash collision must cost a miss, never someone else's K/V (nano-vllm).
  if (block_token_ids.size() != static_cast<size_t>(block_size_) ||
      !std::equal(block_token_ids.begin(), block_token_ids.end(),
                  block_tokens_.begin() + static_cast<int64_t>(b) * block_size_)) {
    return std::nullopt;
  }
  return b;
}

void BlockPool::CacheFullBlock(int32_t block_id, const BlockHash& hash,
                               std::span<const int32_t> block_token_ids) {
  if (!enable_caching_) return;
  PAGODA_CHECK(block_id >= 0 && block_id < num_blocks_) << "block id " << block_id;
  PAGODA_CHECK(ref_cnt_[block_id] > 0) << "caching block " << block_id << " that nobody holds";
  PAGODA_CHECK(block_token_ids.size() == static_cast<size_t>(block_size_))
      << "caching a partial block " << block_id << " (" << block_token_ids.size() << " of "
      << block_size_ << " tokens)";
  if (has_hash_[block_id]) {
    PAGODA_CHECK(block_hash_[block_id] == hash)
        << "block " << block_id << " is already cached under another hash";
    return;
  }
  if (!cached_.emplace(hash, block_id).second) return;  // an identical block is cached
  has_hash_[block_id] = 1;
  block_hash_[block_id] = hash;
  std::copy(block_token_ids.begin(), block_token_ids.end(),
            block_tokens_.begin() + static_cast<int64_t>(block_id) * block_size_);
}

bool BlockPool::ResetPrefixCache() {
  if (num_used_blocks() != 0) return false;
  cached_.clear();
  std::fill(has_hash_.begin(), has_hash_.end(), 0);
  return true;
}

void BlockPool::RecordPrefixCacheQuery(int64_t num_query_tokens, int64_t num_hit_tokens) {
  ++stats_.num_requests;
  stats_.num_query_tokens += num_query_tokens;
  stats_.num_hit_tokens += num_hit_tokens;
}

void BlockPool::CheckInvariants() const {
  int64_t num_zero = 0;
  int64_t num_hashed = 0;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    PAGODA_CHECK(ref_cnt_[b] >= 0) << "block " << b << " ref_cnt " << ref_cnt_[b];
    PAGODA_CHECK((ref_cnt_[b] == 0) == free_queue_.Contains(b))
        << "block " << b << " ref_cnt " << ref_cnt_[b] << " in free queue "
        << free_queue_.Contains(b);
    num_zero += ref_cnt_[b] == 0;
    if (has_hash_[b]) {
      ++num_hashed;
      auto it = cached_.find(block_hash_[b]);
      PAGODA_CHECK(it != cached_.end() && it->second == b) << "block " << b << " hash unmapped";
    }
  }
  PAGODA_CHECK(num_zero == free_queue_.num_free_blocks())
      << num_zero << " unreferenced blocks but " << free_queue_.num_free_blocks() << " queued";
  PAGODA_CHECK(num_hashed == static_cast<int64_t>(cached_.size()))
      << num_hashed << " hashed blocks but " << cached_.size() << " map entries";
  PAGODA_CHECK(static_cast<int64_t>(free_queue_.ToVector().size()) ==
               free_queue_.num_free_blocks())
      << "free queue links disagree with its count";
}

}  // namespace pagoda
