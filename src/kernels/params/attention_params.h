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
  // each query only to the keys it surely reads from codes (codes_only: SidePoolCodesSpan,
  // kernels/cuda/side_pool_span.cuh) and writes, beside each normalized output row, its
  // log2-domain log-sum-exp to lse ([num_tokens, num_heads]; rows with no such keys: none);
  // the SIMT kernel then attends the rest and merges. Unused elsewhere.
  bool codes_only = false;
  float* lse = nullptr;
};

// First key position a query at `pos` attends to.
inline int64_t AttentionWindowStart(int64_t pos, int64_t sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}

}  // namespace pagoda
