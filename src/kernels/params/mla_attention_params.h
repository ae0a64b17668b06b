// Paged multi-head latent attention (DeepSeek-V2/V3 MLA) in the absorbed form: one params
// struct for the float64 reference, the CPU kernel and (later) the CUDA kernels.
//
// The cache of one layer holds, per token, only the compressed latent and the RoPE key:
//   latent_cache: [num_blocks, block_size, kv_lora_rank]  c_kv after kv_a_layernorm
//   rope_cache:   [num_blocks, block_size, rope_dim]      k_pe after RoPE
// (dtype kv_dtype; token position p of a sequence lives in block block_table[p / block_size]
// at offset p % block_size, as in attention_params.h). Quantized caches (latent_format /
// rope_format with quant != kNone): that array is instead blocks of KVBlockBytes(format)
// bytes, one "head" of kv_lora_rank (rope_dim) values per token, in the byte layouts of
// kv/kv_codec.h (per-token formats only: no kivi2 per-channel keys); the kernels
// dequantize each row as they load it. The usual RoPE-aware choice: the latent quantized,
// k_pe kept wide (rope_format.quant = kNone, elements kv_dtype). Every head reads the same rows: MLA
// is MQA over the latent, so a step reads kv_lora_rank + rope_dim values per key.
//
// The caller folds W_UK into the query (q_lat = W_UK[h]^T q_nope[h]) and applies W_UV to
// the output; for query head h at position pos:
//   s_j   = scale * (q_lat[h] . c_kv[j] + q_pe[h] . k_pe[j])     for keys j in [0, pos]
//   out[h] = sum_j softmax(s)_j c_kv[j]                           (kv_lora_rank values)
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/params/attention_params.h"

namespace pagoda {

struct MlaAttentionParams {
  // [num_tokens, num_heads, kv_lora_rank + rope_dim] f32: q_lat then q_pe (RoPE applied).
  const float* q = nullptr;
  // [num_tokens, num_heads, kv_lora_rank] f32: the attention output in latent space.
  float* out = nullptr;
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t kv_lora_rank = 0;
  int64_t rope_dim = 0;

  const void* latent_cache = nullptr;  // [num_blocks, block_size, kv_lora_rank]
  const void* rope_cache = nullptr;    // [num_blocks, block_size, rope_dim]
  DType kv_dtype = DType::kF32;        // kF32, kBF16 or kF16: the element type of a wide array
  int64_t block_size = 16;
  // Per array: quant kNone (the default) means kv_dtype elements; otherwise the block format
  // (block_size equal to block_size above, num_heads 1, head_dim kv_lora_rank or rope_dim,
  // !per_channel).
  KVArrayFormat latent_format, rope_format;

  const int32_t* positions = nullptr;            // [num_tokens] query positions
  const int32_t* const* block_tables = nullptr;  // [num_tokens] each token's sequence table
  // Softmax scale: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), times mscale^2 with YaRN.
  float scale = 1.0f;

  int64_t q_stride() const { return kv_lora_rank + rope_dim; }
};

}  // namespace pagoda
