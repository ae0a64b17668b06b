// WidePool: the bookkeeping of the wide side pool (backend/kv_storage.h's design note) for a
// backend that plans a whole step's KV writes at once, before its layers run (the CUDA
// backend: the step's kernels, captured in graphs, read the plan from device memory).
//
// The rules are KVStorage's, for the policies that need no queries (kivi2's residual,
// --kv-sink-tokens, --kv-recent-tokens):
//   - a block gets a wide copy when a token is written at its offset 0 and a policy wants one
//     (kivi2 or recent tokens: every block; sink tokens only: blocks holding positions < S);
//     a write into a block that has a copy also goes to the copy;
//   - when a block's last offset is written, kivi2 keys are quantized from the copy (after the
//     step's rows are written), and the copy is released when the next step is planned (the
//     step's own queries still read it), unless the block holds sink positions;
//   - copy-on-write copies flags and the wide copy with the block;
//   - a freed block that no prefix hit can reach gives its copy back (Release).
// The plan does not depend on the layer (every layer that uses the pool is written with the
// same tokens), so one WidePool serves all of them; the bytes live with the backend, one pair
// of arrays [size(), block_size, num_kv_heads, head_dim] a layer.
//
// A block first written at an offset > 0 without a copy, where a policy wants one, gets a copy
// whose earlier rows are undefined (KVStorage dequantizes them into it): the engine writes every
// block of a sequence from offset 0 and copy-on-write carries the copy, so only the engine's
// padding block (decode_padding.h: rows whose results are dropped) is written that way. Rows
// with a negative slot write nothing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace pagoda {

struct WidePoolPolicy {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  bool kivi2 = false;  // keys quantized per channel, once their block is full
  int64_t sink_tokens = 0;
  int64_t recent_tokens = 0;
};

class WidePool {
 public:
  explicit WidePool(const WidePoolPolicy& policy);

  const WidePoolPolicy& policy() const { return policy_; }

  // Plans the writes of one step's tokens (their slots and positions, in step order).
  void PlanStep(std::span<const int64_t> slots, std::span<const int32_t> positions);
  // Per token of the last plan: the wide row its K and V rows also go to (wide block x
  // block_size + offset), or -1.
  const std::vector<int32_t>& wide_rows() const { return wide_rows_; }
  // Per token of the last plan: the block whose kivi2 keys are quantized from its wide copy
  // once the step's rows are written (the token filled it), or -1.
  const std::vector<int32_t>& fill_blocks() const { return fill_blocks_; }

  // [num_blocks]: each block's wide copy, or -1.
  const std::vector<int32_t>& index() const { return index_; }
  // The entries of index() changed since the last TakeChanged, as [first, last) (empty: none).
  std::pair<int64_t, int64_t> TakeChanged();
  // Wide blocks handed out so far (in use or free): the arrays need at least this many.
  int32_t size() const { return size_; }
  // Wide blocks in use.
  int64_t in_use() const { return size_ - static_cast<int64_t>(free_.size()); }

  // Copy-on-write of block src into dst: flags follow the block; returns the wide copies to
  // copy (src's, dst's), or {-1, -1} when src has none (dst's copy, if any, is released).
  std::pair<int32_t, int32_t> CopyBlock(int32_t src, int32_t dst);
  // Freed blocks no prefix hit can reach (KVCache::ReleaseBlocks): their copies go back.
  void Release(std::span<const int32_t> blocks);

 private:
  int32_t Allocate();
  void SetIndex(int64_t block, int32_t w);

  WidePoolPolicy policy_;
  std::vector<int32_t> index_;
  std::vector<int32_t> free_;
  std::vector<uint8_t> sink_;            // [num_blocks]: holds positions < sink_tokens
  std::vector<uint8_t> keys_quantized_;  // [num_blocks]: kivi2 keys hold codes
  std::vector<int64_t> filled_;          // blocks filled by the last planned step
  std::vector<int32_t> wide_rows_, fill_blocks_;
  int32_t size_ = 0;
  int64_t changed_lo_ = 0, changed_hi_ = 0;
};

}  // namespace pagoda
