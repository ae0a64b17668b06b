#include "kv/free_block_queue.h"

#include "core/error.h"

namespace pagoda {

FreeBlockQueue::FreeBlockQueue(int32_t num_blocks)
    : num_blocks_(num_blocks),
      head_(num_blocks),
      tail_(num_blocks + 1),
      prev_(static_cast<size_t>(num_blocks) + 2, -1),
      next_(static_cast<size_t>(num_blocks) + 2, -1),
      in_queue_(static_cast<size_t>(num_blocks), 0) {
  PAGODA_CHECK(num_blocks >= 0) << "num_blocks " << num_blocks;
  next_[head_] = tail_;
  prev_[tail_] = head_;
  for (int32_t b = 0; b < num_blocks; ++b) Append(b);
}

void FreeBlockQueue::LinkBefore(int32_t block_id, int32_t next) {
  PAGODA_DCHECK(block_id >= 0 && block_id < num_blocks_) << "block " << block_id;
  PAGODA_CHECK(!in_queue_[block_id]) << "block " << block_id << " is already free";
  const int32_t prev = prev_[next];
  prev_[block_id] = prev;
  next_[block_id] = next;
  next_[prev] = block_id;
  prev_[next] = block_id;
  in_queue_[block_id] = 1;
  ++num_free_blocks_;
}

std::optional<int32_t> FreeBlockQueue::PopFront() {
  if (num_free_blocks_ == 0) return std::nullopt;
  const int32_t block_id = next_[head_];
  Remove(block_id);
  return block_id;
}

void FreeBlockQueue::Append(int32_t block_id) { LinkBefore(block_id, tail_); }

void FreeBlockQueue::Prepend(int32_t block_id) { LinkBefore(block_id, next_[head_]); }

void FreeBlockQueue::Remove(int32_t block_id) {
  PAGODA_DCHECK(block_id >= 0 && block_id < num_blocks_) << "block " << block_id;
  PAGODA_CHECK(in_queue_[block_id]) << "block " << block_id << " is not in the free queue";
  const int32_t prev = prev_[block_id];
  const int32_t next = next_[block_id];
  next_[prev] = next;
  prev_[next] = prev;
  prev_[block_id] = next_[block_id] = -1;
  in_queue_[block_id] = 0;
  --num_free_blocks_;
}

std::vector<int32_t> FreeBlockQueue::ToVector() const {
  std::vector<int32_t> out;
  out.reserve(num_free_blocks_);
  for (int32_t b = next_[head_]; b != tail_; b = next_[b]) out.push_back(b);
  return out;
}

}  // namespace pagoda
