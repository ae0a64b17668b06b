// Paged attention on the device over an unquantized cache (f32, bf16 or f16 elements), with
// the contract of kernels/params/attention_params.h; every pointer in `p` is a device
// pointer (block_tables: a device array of [num_tokens] device pointers to the tokens'
// block-table rows). The quantized formats and the wide side pool are not read here: the
// backend refuses them when it makes the cache.
//
// A straightforward correct kernel, not yet the fast one: one thread block per (token, query
// head) walks the token's keys [window start, position] through its block table in tiles of
// 128 keys (one score per thread, online softmax across tiles), GQA by reading KV head
// h / (num_heads / num_kv_heads). REQUIRES: head_dim <= 512.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/attention_params.h"

namespace pagoda::cuda {

void PagedAttention(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
