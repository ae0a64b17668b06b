// Paged attention on the device over an unquantized cache (f32, bf16 or f16 elements), with
// the contract of kernels/params/attention_params.h; every pointer in `p` is a device
// pointer (block_tables: a device array of [num_tokens] device pointers to the tokens'
// block-table rows). The quantized formats and the wide side pool are not read here: the
// backend refuses them when it makes the cache.
//
// Head dims 64 and 128 with up to 8 query heads per KV head (every Llama/Mistral/Qwen shape):
// the grouped split-KV kernel. One thread block per (token, KV head, key split) serves the
// group's query heads from one read of each K/V row: 128 keys per tile, one key's scores per
// thread (every head of the group), an online softmax per head, then each warp adds its 32
// keys' p * V with a lane owning head_dim / 32 dimensions. A token's keys are cut into
// GroupedAttentionSplits(keys) splits, a function of its own key count only, and the splits'
// partial results are merged by log-sum-exp in split order (PagedAttentionMerge), so a token's
// bits never depend on the rest of the batch. Long contexts get several splits so that small
// batches still fill the GPU.
//
// Other shapes: one thread block per (token, query head) over tiles of 128 keys (the first,
// plain kernel). REQUIRES: head_dim <= 512.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/attention_params.h"

namespace pagoda::cuda {

// Splits of a token's `keys` keys: one per 256 keys, at most 8.
constexpr int kMaxAttentionSplits = 8;
__host__ __device__ inline int GroupedAttentionSplits(int64_t keys) {
  const int64_t s = (keys + 255) / 256;
  return static_cast<int>(s < 1 ? 1 : s > kMaxAttentionSplits ? kMaxAttentionSplits : s);
}

// Floats of scratch the grouped kernel needs for `num_tokens` tokens (the splits' partial
// outputs and their max/sum); `scratch` in PagedAttention must hold that many.
int64_t PagedAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim);

// `max_keys`: the most keys any token of the step attends to (sizes the grid).
void PagedAttention(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream);

}  // namespace pagoda::cuda
