// Paged attention on the device with the contract of kernels/params/attention_params.h, over
// plain caches (f32, bf16 or f16 elements) and the per-token quantized formats fp8_e4m3,
// fp8_e5m2 and int8 (k_format / v_format; rows dequantized in registers as code x scale, the
// CPU's values: kernels/cuda/kv_codec.cuh). Every pointer in `p` is a device pointer
// (block_tables: a device array of [num_tokens] device pointers to the tokens' block-table
// rows). int4, nvfp4 and kivi2 are not read here (FlashAttention or PagedAttentionWide below),
// nor is the wide side pool (PagedAttentionWide). (bf16/f16 caches of head dims 64/128 normally go to the
// tensor-core kernel, kernels/cuda/flash_attention.h.)
//
// Head dims 64 and 128 with up to 8 query heads per KV head (every Llama/Mistral/Qwen shape),
// power-of-two block sizes: the grouped kernel. A block serves (token, KV head) for all the
// group's query heads from one read of each K/V row: tiles of up to 64 keys copied into shared
// memory with cp.async (the next tile loads while this one is used), scores and an online
// softmax per head, then p V with each thread owning some of the group's outputs. A token's
// keys are cut into GroupedAttentionSplits(keys) splits, a function of its own key count only;
// each split's softmax state is merged in split order. Few tokens (decode): one block per split
// and a merge kernel, so small batches fill the GPU; many tokens: each block walks its splits
// and merges as it goes. The two modes do the same operations in the same order, so a token's
// bits never depend on the rest of the batch.
//
// Quantized rows reach the grouped kernel when a row is a multiple of 4 bytes (int8: groups of
// a multiple of 8 values); they are copied in 4-byte pieces and dequantized when read.
// Other shapes: one thread block per (token, query head) over tiles of 128 keys (the first,
// plain kernel). REQUIRES: head_dim <= 512.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/attention_params.h"

namespace pagoda::cuda {

// Splits of a token's `keys` keys: one per 128 keys, at most 16.
constexpr int kMaxAttentionSplits = 16;
__host__ __device__ inline int GroupedAttentionSplits(int64_t keys) {
  const int64_t s = (keys + 127) / 128;
  return static_cast<int>(s < 1 ? 1 : s > kMaxAttentionSplits ? kMaxAttentionSplits : s);
}

// Floats of scratch the grouped kernel needs for a step of `num_tokens` tokens (split mode's
// partial states); `scratch` in PagedAttention must hold that many.
int64_t PagedAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim);

// `max_keys`: the most keys any token of the step attends to (sizes the grid).
void PagedAttention(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream);

// Quantized caches with the wide side pool (p.wide_index and its fields set; kivi2 keys per
// channel; no heavy rows), paged_attention_wide.cu: keys read from their blocks' wide copies where
// the CPU reads them wide, else dequantized from their codes (every format the backend stores).
// Head dims 64 and 128 with up to 16 query heads per KV head: blocks per (token, KV head, split of
// the keys) and a merge; `max_keys` sizes the grid, `scratch` holds
// PagedAttentionWideScratchFloats floats. Others: one block per (token, query head); any block
// size, head_dim <= 512.
int64_t PagedAttentionWideScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim);
void PagedAttentionWide(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream);

// The side pool split in two (SidePoolCodesSpan and SidePoolRestRanges,
// kernels/params/attention_params.h): where FlashAttention serves the step's format, it runs
// first with p.codes_only over each query's codes span (writing its normalized rows to p.out
// and their log-sum-exps to p.lse), then PagedAttentionWideRest attends each query's other keys
// (the sink tokens before the span, its own block's wide keys after it: at most two short
// ranges) with PagedAttentionWide's per-key rule and merges FlashAttention's row into its
// result, a block per (token, KV head). Serves head dims 64 and 128, up to 16 query heads per
// KV head (PagedAttentionWideRestServes).
bool PagedAttentionWideRestServes(const PagedAttentionParams& p);
void PagedAttentionWideRest(const PagedAttentionParams& p, cudaStream_t stream);
// Whether the CUDA backend splits side-pool steps so (default on; PAGODA_SIDE_POOL_FLASH=0 at
// start or SetSidePoolFlash(false) keeps the SIMT kernel for every key: a test and a benchmark
// compare the two).
bool SidePoolFlashOn();
void SetSidePoolFlash(bool on);

}  // namespace pagoda::cuda
