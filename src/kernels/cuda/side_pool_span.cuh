// Which keys of a query read codes whatever the side pool holds (PagedAttentionParams: sink
// tokens, recent tokens, kivi2's residual block), so that PagedAttentionWide can give them to
// FlashAttention's quantized paths (p.codes_only) and read only the rest, a few blocks a query,
// in its SIMT kernel (whose per-key rule decides wide copy or codes for them, as the CPU does).
//
// A key k of a query at pos reads its block's wide copy only if k < sink_tokens, or k is in
// the query's own block and own_block_wide or pos - k < recent_tokens (KeySource,
// paged_attention_wide.cu). So every key in [max(first, sink_tokens), last] reads codes, where
// last is the key before the query's own block (own_block_wide), before the recent keys of it
// (recent_tokens > 0), else pos.
#pragma once

#include <cstdint>

#include "kernels/params/attention_params.h"

namespace pagoda::cuda {

// Keys [first, last] of a query attending to [window_first, pos]; empty when last < first.
struct CodesSpan {
  int64_t first, last;
  __host__ __device__ bool empty() const { return last < first; }
};
__host__ __device__ inline CodesSpan SidePoolCodesSpan(const PagedAttentionParams& p, int64_t window_first,
                                                       int64_t pos) {
  const int64_t own = pos - pos % p.block_size;  // the query's own block's first key
  int64_t last = pos;
  if (p.own_block_wide) {
    last = own - 1;
  } else if (p.recent_tokens > 0) {
    last = (pos - p.recent_tokens + 1 > own ? pos - p.recent_tokens + 1 : own) - 1;
  }
  return {window_first > p.sink_tokens ? window_first : p.sink_tokens, last};
}

}  // namespace pagoda::cuda
