// MLA attention in its absorbed form on the device over an unquantized latent cache, with
// the contract of kernels/params/mla_attention_params.h (every pointer a device pointer;
// block_tables a device array of [num_tokens] device pointers). Same structure as
// paged_attention.h: one thread block per (token, head), tiles of 128 keys, online softmax;
// the score reads the latent and the RoPE key, the value is the latent.
// REQUIRES: kv_lora_rank <= 1024, quantized latent/rope formats refused by the backend.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/mla_attention_params.h"

namespace pagoda::cuda {

void MlaAttention(const MlaAttentionParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
