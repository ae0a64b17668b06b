#include "kv/contiguous_allocator.h"

#include "core/error.h"

namespace pagoda {

ContiguousAllocator::ContiguousAllocator(int64_t num_slots, int64_t max_model_len)
    : max_model_len_(max_model_len) {
  PAGODA_CHECK(num_slots >= 0 && max_model_len >= 1)
      << "num_slots " << num_slots << ", max_model_len " << max_model_len;
  num_regions_ = num_slots / max_model_len;
  for (int64_t i = num_regions_ - 1; i >= 0; --i) free_regions_.push_back(i);
}

bool ContiguousAllocator::Admit(int64_t request_id) {
  PAGODA_CHECK(!requests_.count(request_id)) << "request " << request_id << " admitted twice";
  if (free_regions_.empty()) return false;
  requests_[request_id] = Region{free_regions_.back(), 0};
  free_regions_.pop_back();
  return true;
}

bool ContiguousAllocator::AllocateSlots(int64_t request_id, int64_t num_new_tokens) {
  auto it = requests_.find(request_id);
  PAGODA_CHECK(it != requests_.end()) << "request " << request_id << " was not admitted";
  PAGODA_CHECK(num_new_tokens >= 0) << "num_new_tokens " << num_new_tokens;
  if (it->second.num_tokens + num_new_tokens > max_model_len_) return false;
  it->second.num_tokens += num_new_tokens;
  num_used_tokens_ += num_new_tokens;
  return true;
}

void ContiguousAllocator::Free(int64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  num_used_tokens_ -= it->second.num_tokens;
  free_regions_.push_back(it->second.region);
  requests_.erase(it);
}

void ContiguousAllocator::AppendSlotMapping(int64_t request_id, int64_t start_pos,
                                            int64_t num_tokens, std::vector<int64_t>* out) const {
  auto it = requests_.find(request_id);
  PAGODA_CHECK(it != requests_.end()) << "request " << request_id << " was not admitted";
  PAGODA_CHECK(start_pos >= 0 && start_pos + num_tokens <= max_model_len_)
      << "positions " << start_pos << "+" << num_tokens << " past max_model_len "
      << max_model_len_;
  const int64_t base = it->second.region * max_model_len_;
  for (int64_t pos = start_pos; pos < start_pos + num_tokens; ++pos) out->push_back(base + pos);
}

double ContiguousAllocator::Usage() const {
  return num_regions_ == 0 ? 0.0 : static_cast<double>(num_requests()) / num_regions_;
}

double ContiguousAllocator::Waste() const {
  const int64_t reserved = num_reserved_tokens();
  return reserved == 0 ? 0.0 : static_cast<double>(reserved - num_used_tokens_) / reserved;
}

}  // namespace pagoda
