// Writing the step's new K/V rows into their paged-cache slots: token t's K row goes to
// k_cache[slot_mapping[t]] and its V row to v_cache[slot_mapping[t]], converted to the cache's
// element type (round to nearest even), or quantized per (token, head) row in the layout of
// kv/kv_codec.h when the array's format is quantized. A negative slot is skipped.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kv/kv_format.h"

namespace pagoda {

struct KVWriteParams {
  const float* k = nullptr;              // [num_tokens, k_width] f32, row stride k_stride
  const float* v = nullptr;              // [num_tokens, v_width] f32, row stride v_stride
  const int64_t* slot_mapping = nullptr; // [num_tokens] block_id * block_size + offset
  int64_t num_tokens = 0;
  int64_t k_width = 0;                   // num_kv_heads * head_dim (MLA: kv_lora_rank)
  int64_t v_width = 0;                   // num_kv_heads * head_dim_v (MLA: rope_dim)
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  void* k_cache = nullptr;               // [num_blocks * block_size, k_width] of dtype
  void* v_cache = nullptr;               // [num_blocks * block_size, v_width] of dtype
  DType dtype = DType::kF32;             // kF32, kBF16 or kF16
  // Quantized arrays (quant != kNone): blocks of per-(token, head) rows of these formats;
  // num_heads * head_dim equals k_width / v_width. kivi2 keys (per channel) are not written
  // here: their block is quantized once it is full (kernels/cuda/kv_wide.h).
  KVArrayFormat k_format, v_format;
};

}  // namespace pagoda
