// FreeBlockQueue: the KV blocks that no request holds, in eviction order.
//
// vLLM's FreeKVCacheBlockQueue as an intrusive doubly linked list over block ids:
// prev/next are int32 entries of two vectors, so every operation is O(1) and no node is
// ever allocated. The front is evicted (reused) first.
//
//   head <-> b7 <-> b3 <-> b12 <-> ... <-> b5 <-> tail        (head, tail: sentinels)
//            ^ PopFront() takes this one     ^ Append() adds after this one
//
// A block in the queue may still hold cached K/V (it has a prefix hash in the BlockPool):
// it stays reusable by a prefix-cache hit until it reaches the front and is evicted, and
// a hit revives it with Remove() from wherever it sits.
//
// Invariants:
//   - every block id in [0, num_blocks) is in the queue at most once;
//   - Contains(id) is true exactly for the ids linked between the sentinels;
//   - num_free_blocks() is the number of linked ids.
// Not thread-safe: the scheduler owns it through the BlockPool.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pagoda {

class FreeBlockQueue {
 public:
  // Starts with every block 0..num_blocks-1 queued in id order (block 0 at the front).
  // REQUIRES: num_blocks >= 0.
  explicit FreeBlockQueue(int32_t num_blocks);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free_blocks() const { return num_free_blocks_; }
  bool Contains(int32_t block_id) const { return in_queue_[block_id] != 0; }

  // Takes the front block (the least recently freed); nullopt when empty.
  std::optional<int32_t> PopFront();
  // Queues a block at the back (evicted last). REQUIRES: !Contains(block_id).
  void Append(int32_t block_id);
  // Queues a block at the front (evicted first). REQUIRES: !Contains(block_id).
  void Prepend(int32_t block_id);
  // Unlinks a block from anywhere in the queue. REQUIRES: Contains(block_id).
  void Remove(int32_t block_id);

  // The queued ids, front to back. O(n); for tests and debugging.
  std::vector<int32_t> ToVector() const;

 private:
  void LinkBefore(int32_t block_id, int32_t next);

  int32_t num_blocks_;
  int32_t num_free_blocks_ = 0;
  int32_t head_;  // sentinel index num_blocks
  int32_t tail_;  // sentinel index num_blocks + 1
  std::vector<int32_t> prev_;  // [num_blocks + 2]
  std::vector<int32_t> next_;  // [num_blocks + 2]
  std::vector<uint8_t> in_queue_;  // [num_blocks]
};

}  // namespace pagoda
