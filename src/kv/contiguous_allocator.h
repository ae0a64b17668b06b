// ContiguousAllocator: the pre-paging KV layout (--kv-layout contiguous), kept as the
// baseline that shows what paging buys. Every admitted request reserves max_model_len
// consecutive slots up front, whatever its real length; slot = region * max_model_len + pos.
//
//   slots: | region 0: max_model_len | region 1: max_model_len | ... | (remainder unused)
//
// Waste = reserved but unused slots / reserved slots: the gap between a request's length
// and max_model_len, for as long as the request lives (the "internal fragmentation" of the
// vLLM paper). Compare KVCacheManager, which wastes only the slack of each last block.
//
// Invariants: each region belongs to at most one request; num_used_tokens() <=
// num_reserved_tokens() == num_requests() * max_model_len <= num_slots.
// Failure: no free region, or a request growing past max_model_len, returns false.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace pagoda {

class ContiguousAllocator {
 public:
  // REQUIRES: num_slots >= 0, max_model_len >= 1.
  ContiguousAllocator(int64_t num_slots, int64_t max_model_len);

  int64_t max_model_len() const { return max_model_len_; }
  // Requests that fit at once: num_slots / max_model_len.
  int64_t max_num_requests() const { return static_cast<int64_t>(num_regions_); }
  int64_t num_requests() const { return static_cast<int64_t>(requests_.size()); }

  // Reserves a region for a new request; false when none is free.
  // REQUIRES: the request has no region.
  bool Admit(int64_t request_id);
  // Same contract as KVCacheManager::AllocateSlots, in tokens: the request now needs
  // `num_new_tokens` more slots. False (nothing changes) past max_model_len.
  // REQUIRES: the request was admitted.
  bool AllocateSlots(int64_t request_id, int64_t num_new_tokens);
  // Releases the region; no-op for an unknown id.
  void Free(int64_t request_id);

  // Slot of each position in [start_pos, start_pos + num_tokens), appended to `out`.
  void AppendSlotMapping(int64_t request_id, int64_t start_pos, int64_t num_tokens,
                         std::vector<int64_t>* out) const;

  int64_t num_reserved_tokens() const { return num_requests() * max_model_len_; }
  int64_t num_used_tokens() const { return num_used_tokens_; }
  // Reserved regions / all regions, in [0, 1].
  double Usage() const;
  // (reserved - used) / reserved; 0 when nothing is reserved.
  double Waste() const;

 private:
  struct Region {
    int64_t region = 0;
    int64_t num_tokens = 0;
  };
  int64_t max_model_len_;
  int64_t num_regions_;
  std::vector<int64_t> free_regions_;  // a stack: lowest region ids on top
  std::unordered_map<int64_t, Region> requests_;
  int64_t num_used_tokens_ = 0;
};

}  // namespace pagoda
