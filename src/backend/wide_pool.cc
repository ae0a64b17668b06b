#include "backend/wide_pool.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

WidePool::WidePool(const WidePoolPolicy& policy) : policy_(policy) {
  PAGODA_CHECK(policy.num_blocks >= 0 && policy.block_size > 0) << "WidePool: " << policy.num_blocks << " blocks of "
                                                                 << policy.block_size;
  index_.assign(policy.num_blocks, -1);
  sink_.assign(policy.num_blocks, 0);
  keys_quantized_.assign(policy.num_blocks, 0);
}

int32_t WidePool::Allocate() {
  if (!free_.empty()) {
    const int32_t w = free_.back();
    free_.pop_back();
    return w;
  }
  return size_++;
}

void WidePool::SetIndex(int64_t block, int32_t w) {
  if (index_[block] == w) return;
  index_[block] = w;
  if (changed_lo_ == changed_hi_) {
    changed_lo_ = block;
    changed_hi_ = block + 1;
  } else {
    changed_lo_ = std::min(changed_lo_, block);
    changed_hi_ = std::max(changed_hi_, block + 1);
  }
}

std::pair<int64_t, int64_t> WidePool::TakeChanged() {
  const std::pair<int64_t, int64_t> out{changed_lo_, changed_hi_};
  changed_lo_ = changed_hi_ = 0;
  return out;
}

void WidePool::PlanStep(std::span<const int64_t> slots, std::span<const int32_t> positions) {
  PAGODA_CHECK(slots.size() == positions.size()) << "WidePool::PlanStep: " << slots.size() << " slots, "
                                                  << positions.size() << " positions";
  const int64_t bs = policy_.block_size;
  // The previous step's queries are done with the blocks it filled.
  for (int64_t b : filled_) {
    if (index_[b] >= 0 && !sink_[b]) {
      free_.push_back(index_[b]);
      SetIndex(b, -1);
    }
  }
  filled_.clear();
  const size_t n = slots.size();
  wide_rows_.assign(n, -1);
  fill_blocks_.assign(n, -1);
  for (size_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;  // a row that writes nothing
    PAGODA_CHECK(slots[t] < policy_.num_blocks * bs)
        << "WidePool::PlanStep: slot " << slots[t] << " of " << policy_.num_blocks * bs;
    const int64_t block = slots[t] / bs, offset = slots[t] % bs;
    const bool sink = positions[t] < policy_.sink_tokens;
    if (offset == 0) {  // a new use of the block
      sink_[block] = 0;
      keys_quantized_[block] = 0;
    }
    if (sink) sink_[block] = 1;
    const bool want = policy_.kivi2 || policy_.recent_tokens > 0 || sink;
    if (want || index_[block] >= 0) {
      if (index_[block] < 0) SetIndex(block, Allocate());  // rows before `offset`: undefined (header)
      wide_rows_[t] = static_cast<int32_t>(index_[block] * bs + offset);
    }
    if (offset == bs - 1) {
      if (policy_.kivi2 && !keys_quantized_[block]) {
        fill_blocks_[t] = static_cast<int32_t>(block);
        keys_quantized_[block] = 1;
      }
      filled_.push_back(block);
    }
  }
}

void WidePool::Release(std::span<const int32_t> blocks) {
  for (const int32_t b : blocks) {
    PAGODA_CHECK(b >= 0 && b < policy_.num_blocks) << "WidePool::Release: block " << b;
    std::erase(filled_, static_cast<int64_t>(b));
    sink_[b] = 0;
    if (index_[b] >= 0) {
      free_.push_back(index_[b]);
      SetIndex(b, -1);
    }
  }
}

std::pair<int32_t, int32_t> WidePool::CopyBlock(int32_t src, int32_t dst) {
  PAGODA_CHECK(src >= 0 && dst >= 0 && src < policy_.num_blocks && dst < policy_.num_blocks)
      << "WidePool::CopyBlock " << src << " -> " << dst;
  std::erase(filled_, static_cast<int64_t>(dst));  // a new use: its copy is not the filled block's
  sink_[dst] = sink_[src];
  keys_quantized_[dst] = keys_quantized_[src];
  if (index_[src] < 0) {
    if (index_[dst] >= 0) {
      free_.push_back(index_[dst]);
      SetIndex(dst, -1);
    }
    return {-1, -1};
  }
  if (index_[dst] < 0) SetIndex(dst, Allocate());
  return {index_[src], index_[dst]};
}

}  // namespace pagoda
