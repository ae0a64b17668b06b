// The wide side pool's writes on the device (backend/wide_pool.h plans them): the step's K/V
// rows copied into their blocks' wide copies, and kivi2 keys quantized per channel from the wide
// copy of each block the step filled (kv/kv_codec.h's per-channel layout, the CPU codec's bytes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kv/kv_format.h"

namespace pagoda::cuda {

struct KVWideWriteParams {
  const float* k = nullptr;  // [num_tokens, k_width] f32, row stride k_stride
  const float* v = nullptr;  // [num_tokens, v_width] f32, row stride v_stride
  int64_t k_stride = 0, v_stride = 0;
  int64_t num_tokens = 0, k_width = 0, v_width = 0;
  const int32_t* wide_rows = nullptr;  // [num_tokens]: wide row (wide block x block_size + offset) or -1
  void* k_wide = nullptr;              // [wide rows, k_width] of dtype
  void* v_wide = nullptr;              // [wide rows, v_width] of dtype
  DType dtype = DType::kBF16;          // kF32, kBF16 or kF16 (the cache's wide type)
};
// Token t's K and V rows, rounded to dtype, into wide row wide_rows[t] (none where it is -1).
void WriteWideRows(const KVWideWriteParams& p, cudaStream_t stream);

struct Kivi2KeysParams {
  const int32_t* fill_blocks = nullptr;  // [num_tokens]: a block the token filled, or -1
  int64_t num_tokens = 0;
  const int32_t* wide_index = nullptr;   // [num_blocks]: each block's wide copy
  const void* k_wide = nullptr;          // [wide blocks, block_size, num_heads, head_dim] of dtype
  DType dtype = DType::kBF16;
  void* k_cache = nullptr;               // the layer's K blocks
  int64_t k_block_bytes = 0;             // KVBlockBytes(k_format)
  KVArrayFormat k_format;                // kivi2, per_channel
};
// Each filled block's keys: per (head, channel) over the block's rows of its wide copy, scale
// (max - min) / 3 and min as f16, then the 2-bit codes (kv/kv_codec.cc's QuantizeKVBlock).
void QuantizeFilledKivi2Keys(const Kivi2KeysParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
