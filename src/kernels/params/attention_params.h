// Paged attention over a per-layer KV cache: one params struct for the float64
// reference, the CPU kernel and (later) the CUDA kernels.
//
// The cache of one layer is two arrays of blocks,
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]  (dtype kv_dtype)
// and token position p of a sequence lives in block block_table[p / block_size] at
// offset p % block_size. Every query token carries its own position and a pointer to
// its sequence's block table, so a batch may mix prefill chunks and decodes of
// sequences of any length ("ragged" batch).
//
// Quantized caches: k_format / v_format say how each array stores its blocks (the byte
// layouts are in kv/kv_codec.h); every block is self-contained (codes and scales
// inside its bytes). The kernel dequantizes one row at a time into a small tile, never the
// whole cache. A side pool of wide (wide_dtype) block copies serves the mixed-precision
// policies: sink tokens, the recent tokens of the query's own block, and kivi2's residual
// (the not-yet-full block whose keys cannot be quantized per channel yet).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kv/kv_format.h"

// The helpers below run on the host and, compiled by nvcc, on the device.
#if defined(__CUDACC__)
#define PAGODA_HOST_DEVICE __host__ __device__
#else
#define PAGODA_HOST_DEVICE
#endif

namespace pagoda {

struct PagedAttentionParams {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim] f32, RoPE applied
  float* out = nullptr;      // [num_tokens, num_heads, head_dim] f32
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // divides num_heads; query head h reads KV head h / (num_heads / num_kv_heads)
  int64_t head_dim = 0;

  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  DType kv_dtype = DType::kF32;   // kF32, kBF16 or kF16
  int64_t block_size = 16;

  const int32_t* positions = nullptr;            // [num_tokens] query positions
  const int32_t* const* block_tables = nullptr;  // [num_tokens] each token's sequence table
  float scale = 1.0f;           // softmax scale, usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;   // > 0: query at p sees keys (p - window, p]; 0: all of [0, p]

  // Quantized caches (quant != kNone; then k_cache/v_cache hold blocks of
  // KVBlockBytes(format) bytes and kv_dtype is unused). num_heads/head_dim/block_size of the
  // formats equal num_kv_heads/head_dim/block_size above.
  KVArrayFormat k_format, v_format;
  // Wide copies of some blocks: [num_wide_blocks, block_size, num_kv_heads, head_dim] in
  // wide_dtype (kF32, kBF16 or kF16); null when no policy needs them.
  const void* k_wide = nullptr;
  const void* v_wide = nullptr;
  DType wide_dtype = DType::kBF16;
  const int32_t* wide_index = nullptr;  // [num_blocks] wide copy of each block, -1: none; may be null
  // Which keys read their wide copy (when the block has one): positions < sink_tokens, and
  // keys in the query's own block that are within recent_tokens of it (all of them when
  // own_block_wide, kivi2's residual).
  int64_t sink_tokens = 0;
  int64_t recent_tokens = 0;
  bool own_block_wide = false;
  // The CUDA backend's split of a side-pool step (PagedAttentionWide): FlashAttention attends
  // each query only to the keys it surely reads from codes (codes_only: SidePoolCodesSpan
  // below) and writes, beside each normalized output row, its
  // log2-domain log-sum-exp to lse ([num_tokens, num_heads]; rows with no such keys: none);
  // the SIMT kernel then attends the rest and merges. Unused elsewhere.
  bool codes_only = false;
  float* lse = nullptr;
};

// First key position a query at `pos` attends to.
PAGODA_HOST_DEVICE inline int64_t AttentionWindowStart(int64_t pos, int64_t sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}

// The side pool's rule, one copy for every kernel (the CPU's KVReader, the CUDA SIMT kernel, the
// split below): a key of a query at `pos` reads its block's wide copy, where the block has one,
// if it is a sink token, or lies in the query's own block and is kivi2's residual
// (own_block_wide) or one of the recent tokens; else its codes.
PAGODA_HOST_DEVICE inline bool SidePoolKeyWide(const PagedAttentionParams& p, int64_t key, int64_t pos) {
  if (key < p.sink_tokens) return true;
  if (key / p.block_size != pos / p.block_size) return false;
  return p.own_block_wide || pos - key < p.recent_tokens;
}

// The keys [first, last] of a query attending to [window_first, pos] that read codes whatever
// the pool holds (SidePoolKeyWide is false for each): from the end of the sink tokens up to the
// key before its own block (own_block_wide), before its recent tokens, or up to pos. Empty when
// last < first.
struct CodesSpan {
  int64_t first, last;
  PAGODA_HOST_DEVICE bool empty() const { return last < first; }
};
PAGODA_HOST_DEVICE inline CodesSpan SidePoolCodesSpan(const PagedAttentionParams& p, int64_t window_first,
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

// The rest of [window_first, pos] besides the codes span, at most two ranges [start, end): the
// keys before the span and those after it (none: the span is the whole window), or the whole
// window when the span is empty.
struct SidePoolRest {
  int count;
  int64_t start[2], end[2];
};
PAGODA_HOST_DEVICE inline SidePoolRest SidePoolRestRanges(const PagedAttentionParams& p, int64_t window_first,
                                                          int64_t pos) {
  const CodesSpan c = SidePoolCodesSpan(p, window_first, pos);
  SidePoolRest r{0, {0, 0}, {0, 0}};
  if (c.empty()) {
    r.start[0] = window_first;
    r.end[0] = pos + 1;
    r.count = 1;
    return r;
  }
  if (c.first > window_first) {
    r.start[r.count] = window_first;
    r.end[r.count++] = c.first;
  }
  if (c.last < pos) {
    r.start[r.count] = c.last + 1;
    r.end[r.count++] = pos + 1;
  }
  return r;
}

}  // namespace pagoda
