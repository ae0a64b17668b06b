// MLA attention in its absorbed form on the device over an unquantized latent cache, with
// the contract of kernels/params/mla_attention_params.h (every pointer a device pointer;
// block_tables a device array of [num_tokens] device pointers). bf16/f16 caches of DeepSeek's
// latent (kv_lora_rank 512, or 64, + RoPE 64): tensor cores, a block per (token, up to 64 heads)
// reading each tile of the token's latent once for all of them; up to 16 heads, the keys cut
// into FlashAttention's segments, split across blocks for decode-sized steps (mla_attention.cu). Other shapes
// and f32 caches: one thread block per (token, head), tiles of 128 keys, online softmax in f32;
// the score reads the latent and the RoPE key, the value is the latent. Either way a row's
// result depends only on its token: the same bits in any batch.
// REQUIRES: kv_lora_rank <= 1024, quantized latent/rope formats refused by the backend.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/mla_attention_params.h"

namespace pagoda::cuda {

// max_keys: the most keys a token of the step attends to (the split blocks' grid depth, as
// FlashAttention's: a decode graph captured for a depth serves its later steps). scratch:
// MlaAttentionScratchFloats(p, max_keys) floats (none needed when that is 0).
void MlaAttention(const MlaAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream);
int64_t MlaAttentionScratchFloats(const MlaAttentionParams& p, int64_t max_keys);

}  // namespace pagoda::cuda
