// Paged attention on tensor cores: FlashAttention-2-style tiles (mma.sync m16n8k16) over a
// bf16 or f16 KV cache, or an fp8 (e4m3, e5m2), int8, int4 or nvfp4 one (rows copied raw and
// converted in registers, or for nvfp4 and some int8/int4 scale groups in shared memory:
// flash_quant.cuh), for head dims 64 and 128, up to 16 query heads per KV head and power-of-two
// block sizes; the contract of kernels/params/attention_params.h (the grouped SIMT kernel in
// paged_attention.cu serves the other shapes, f32 caches and int8 groups that are not 8k values
// dividing the head dim; int4 and nvfp4 run here only).
//
// A warp computes 16 query rows: the G query heads of one KV head for 16 / G consecutive
// tokens of one sequence (GQA packing: the group shares every K/V read). Q is rounded to a
// 16-bit type (the cache's; f16 for quantized rows read in registers, bf16 for dequantized
// tiles), S = Q K^T and O += P V run on tensor cores with f32 accumulators, P is rounded to the
// V operand's type for the second product (as FlashAttention does), the online softmax is in
// f32 in the log2 domain.
//
// The same bits whatever the step: every row's result is a function of its own position only.
//   - Keys are walked in tiles of 64 at absolute positions [64j, 64j + 64); keys outside a
//     row's window are masked to -inf, which leaves its softmax state unchanged bit for bit.
//   - A row's keys are cut into segments at absolute multiples of FlashSegmentKeys(first, pos)
//     (128, 256 or 512 keys by the row's length, doubled until at most 32 segments cover the
//     row); each segment's state (m, l, O) is merged into the result in segment order with
//     explicit roundings.
// Three launch shapes do those same operations:
//   split   (<= kFlashSplitMaxTokens tokens: decode) one warp per (token, KV head, segment),
//           partial states to scratch, a merge kernel; small batches fill the GPU;
//   narrow  (more tokens, one per sequence; or any tokens: kivi2's long prefill steps) one warp
//           per (token, KV head) walking the segments;
//   wide    (prefill) four warps per block share each K/V tile for 4 * 16 / G consecutive tokens
//           of a sequence (a FlashWorkItem), each walking the segments of its rows; for kivi2
//           with SetFlashKivi2Items(true) one warp a block, 16 / G tokens (all 16 rows of its
//           products) instead of the narrow shape's one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/params/attention_params.h"

namespace pagoda::cuda {

// Consecutive tokens of one sequence that one wide block serves.
struct FlashWorkItem {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
};

// Whether FlashAttention serves `p` (bf16/f16 cache, or K and V both fp8, both nvfp4, or both
// int8 or int4 with scale groups of 8k values dividing the head dim, 16-byte aligned; head dim 64
// or 128, group size <= 16, power-of-two block size). kivi2 only for the side pool's codes spans
// (p.codes_only) in the one-warp blocks, blocks of 16+ slots, V groups of 32k values dividing the
// head dim, with bulk copies on.
bool FlashAttentionSupports(const PagedAttentionParams& p);

// Steps of at most this many tokens run split; scratch holds their partial states.
constexpr int64_t kFlashSplitMaxTokens = 128;
constexpr int kFlashMaxSegments = 32;
int64_t FlashAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim);

// Keys per segment for a row attending to [first, pos]: 128 for rows of at most
// kFlashTinyRowKeys keys and 256 up to kFlashShortRowKeys (a short row keeps enough segments,
// each a short chain of tiles, to fill the GPU in a small batch: a batch-1 decode step at
// 512-token contexts waits on each layer's attention), 512 for longer ones (half the merges
// and partial states: at batch 128, 4K-token contexts reach 84% of the copy bandwidth instead
// of 80%), doubled until at most 32 segments cover the row. A function of the row alone, so
// every launch shape cuts a row the same way. kFlashSegmentUnit is the smallest.
constexpr int64_t kFlashSegmentUnit = 128, kFlashTinyRowKeys = 1024, kFlashShortRowKeys = 2048;
__host__ __device__ inline int64_t FlashSegmentKeys(int64_t first, int64_t pos) {
  const int64_t keys = pos - first + 1;
  int64_t seg = keys > kFlashShortRowKeys  ? 4 * kFlashSegmentUnit
                : keys > kFlashTinyRowKeys ? 2 * kFlashSegmentUnit
                                           : kFlashSegmentUnit;
  while (pos / seg - first / seg + 1 > kFlashMaxSegments) seg *= 2;
  return seg;
}

// The split shape's grid depth for a step whose tokens attend to at most `max_keys` keys: a power
// of two (few distinct values: a decode graph is captured per depth) covering every token's
// segments, at most kFlashMaxSegments.
int FlashSplitDepth(int64_t max_keys);

// Tokens per wide work item for p's step whose longest row has `max_keys` keys: 64 query rows
// (16 / group tokens a warp, four warps), or 128 where the wgmma kernel serves the step with two
// consumer warpgroups a block; kivi2 (one-warp blocks, FlashKivi2Items): 16 / group.
int64_t FlashTokensPerItem(const PagedAttentionParams& p, int64_t max_keys);
// The wide launch's items: every sequence (query_start_loc, as in StepDescription) cut into
// runs of at most `tokens_per_item` tokens, the longest-context runs first.
std::vector<FlashWorkItem> FlashWorkItems(std::span<const int32_t> query_start_loc, int64_t tokens_per_item);

// The wide shape on Hopper warpgroup products (flash_wgmma.cu) for bf16/f16 caches: the same
// bits as the mma.sync wide kernel, faster once rows are long (H100, causal prefill, one call:
// d128 181 TFLOP/s at 1K tokens, where mma.sync gave 137 before; d64 125.5 against mma.sync's
// 121-123 at 1K, 186 at 4K against 155). kAuto takes it for steps whose longest row has at
// least kFlashWgmmaMinKeys keys; PAGODA_FLASH_WGMMA=0 or 1 sets kOff or kOn at start.
enum class FlashWgmma { kAuto, kOff, kOn };
constexpr int64_t kFlashWgmmaMinKeys = 1024;  // both head dims
void SetFlashWgmma(FlashWgmma mode);
// Its building blocks alone (a test): S = Q K^T [64 x 64] and O = P V [64 x head_dim] for one
// tile, q/k/v [64, head_dim] and p [64, 64] f32 device rows rounded to bf16 (f16: f16).
void WgmmaTileProductsForTest(const float* q, const float* k, const float* v, const float* p, float* s, float* o,
                              int head_dim, bool f16, cudaStream_t stream);

// The one-warp (decode) shapes copy a quantized K/V tile's runs (a paged block's rows of the KV
// head, contiguous in head-major blocks) by bulk copies, one a run, where blocks have at least 8
// slots; else by cp.async, every lane 16-byte pieces. The same values land either way.
// PAGODA_FLASH_TMA=0 sets cp.async at start; SetFlashRowsBulk(false) too (a test compares them).
void SetFlashRowsBulk(bool on);
bool FlashRowsBulkOn();

enum class FlashShape { kSplit, kNarrow, kWide };
// The launch shape for a step of `num_tokens` tokens in `num_seqs` sequences over a cache of
// `quant`: split up to FlashSplitMaxTokens() tokens (kFlashSplitMaxTokens unless set lower), then
// narrow (one token a sequence) or wide; kivi2, which runs one-warp blocks only, takes the
// narrow shape for any longer step (a warp walks each token's keys: the same bits) unless
// FlashKivi2Items() (then wide: a warp a work item of 16 / G tokens).
FlashShape ChooseFlashShape(int64_t num_tokens, int64_t num_seqs, KVQuant quant = KVQuant::kNone);
// kivi2's prefill steps on one-warp work items (the wide shape's items, a warp a block) rather
// than the narrow shape: the same bits, G-fold fewer warps, each using all 16 rows of its
// products. Off unless PAGODA_FLASH_KIVI2_ITEMS=1 at start or SetFlashKivi2Items(true): a device
// run has not yet checked it (tests: SidePoolMatchesTheCpu, Kivi2PrefillItemsGiveTheNarrowBits).
bool FlashKivi2Items();
void SetFlashKivi2Items(bool on);
// The split shape's token limit, at most kFlashSplitMaxTokens (the scratch's size):
// PAGODA_FLASH_SPLIT_MAX_TOKENS sets it at start, SetFlashSplitMaxTokens later (a benchmark
// compares the shapes: the same bits either way).
int64_t FlashSplitMaxTokens();
void SetFlashSplitMaxTokens(int64_t tokens);

// `max_keys`: the most keys a token of the step attends to (FlashSplitDepth); `items`:
// the wide shape's work items in device memory (FlashWorkItems), unused by the others.
// out_bf16: also the output rounded to bf16 there ([num_tokens, num_heads * head_dim]
// contiguous: the o GEMM's input, GemmBf16Params::xb_ready), or null. pdl: launched as a
// programmatic dependent of the kernel ahead (kernels/cuda/pdl.cuh), and the merge of it.
void FlashAttention(const PagedAttentionParams& p, FlashShape shape, int64_t max_keys, const FlashWorkItem* items,
                    int64_t num_items, float* scratch, cudaStream_t stream, uint16_t* out_bf16 = nullptr,
                    bool pdl = false);

}  // namespace pagoda::cuda
