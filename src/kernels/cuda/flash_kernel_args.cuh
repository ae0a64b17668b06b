// What FlashAttention's kernels (flash_kernel.cuh's mma.sync kernel, flash_wgmma.cu's
// warpgroup kernel) share: their arguments, a row's window start and a warp's rows; and the
// wgmma shape's launch, which flash_attention.cu's launcher calls.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/params/attention_params.h"

namespace pagoda::cuda::flash {

// Warps a block of the mma.sync kernel's wide (prefill) shape: 64 query rows.
constexpr int kWideWarps = 4;

struct KernelArgs {
  PagedAttentionParams p;
  const FlashWorkItem* items;  // wide shape; null: one token per block
  float* partial;              // split shape: [token][head][segment] rows of HD, then (m, l) pairs
  __nv_bfloat16* out_bf16;     // the output rounded to bf16 too (the o GEMM's input), or null
  float scale_log2;
  int group;
  int tokens_per_warp;
  int k_row_bytes, v_row_bytes;  // a (token, KV head) row of the cache
  int k_scale_group, v_scale_group;  // int8, int4: values per scale
  int k_group_shift, v_group_shift;  // read in registers (IntRegs): log2 of those (powers of two)
  float v_global;                    // nvfp4: V's tensor scale (1 when the format's is 0)
  int bulk;  // the one-warp shapes over quantized caches: K/V runs by bulk copies (FlashRowsBulk), else cp.async
};

__device__ __forceinline__ int WindowStart(const PagedAttentionParams& p, int pos) {
  return p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? static_cast<int>(pos - p.sliding_window + 1) : 0;
}

// A row's keys [first, last]: its window up to its position, or with p.codes_only the keys it
// surely reads from codes (SidePoolCodesSpan); none when last < first.
struct RowSpan {
  int first, last;
};
__device__ __forceinline__ RowSpan RowKeys(const PagedAttentionParams& p, int pos) {
  const int first = WindowStart(p, pos);
  if (!p.codes_only) return {first, pos};
  const CodesSpan c = SidePoolCodesSpan(p, first, pos);
  return {static_cast<int>(c.first), static_cast<int>(c.last)};
}

// The rows of thread (g = lane / 4) in a warp serving tokens [w_begin, w_end): row r = g + 8h is
// head r % group of token w_begin + r / group; out_rows (token * num_heads + head) for valid ones.
__device__ __forceinline__ void WarpRows(const KernelArgs& a, int w_begin, int w_end, int kvh, int g, Rows& rows,
                                         int64_t (&out_rows)[2]) {
  const PagedAttentionParams& p = a.p;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h, i = r / a.group, tok = w_begin + i;
    RowSpan span{0, -1};
    if (i < a.tokens_per_warp && tok < w_end) span = RowKeys(p, p.positions[tok]);
    rows.valid[h] = span.last >= span.first;
    if (rows.valid[h]) {
      rows.pos[h] = span.last;
      rows.first[h] = span.first;
      rows.seg[h] = static_cast<int>(FlashSegmentKeys(rows.first[h], rows.pos[h]));
      out_rows[h] = static_cast<int64_t>(tok) * p.num_heads + static_cast<int64_t>(kvh) * a.group + r % a.group;
    } else {
      rows.pos[h] = -1;
      rows.first[h] = 0;
      rows.seg[h] = kFlashSegmentUnit;
      out_rows[h] = 0;
    }
  }
}

// The keys of a warp's rows (Rows): any of them sees [lo, hi], every one [all_lo, all_hi].
struct WarpKeys {
  int lo, hi, all_lo, all_hi;
};
__device__ __forceinline__ WarpKeys WarpKeyRange(const Rows& rows) {
  WarpKeys k{INT_MAX, -1, 0, INT_MAX};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows.valid[h]) {
      k.lo = min(k.lo, rows.first[h]);
      k.hi = max(k.hi, rows.pos[h]);
      k.all_lo = max(k.all_lo, rows.first[h]);
      k.all_hi = min(k.all_hi, rows.pos[h]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    k.lo = min(k.lo, __shfl_xor_sync(0xffffffffu, k.lo, o));
    k.hi = max(k.hi, __shfl_xor_sync(0xffffffffu, k.hi, o));
    k.all_lo = max(k.all_lo, __shfl_xor_sync(0xffffffffu, k.all_lo, o));
    k.all_hi = min(k.all_hi, __shfl_xor_sync(0xffffffffu, k.all_hi, o));
  }
  return k;
}

// The wide shape on warpgroup products (flash_wgmma.cu) for T = __nv_bfloat16 or __half and
// head dims 64 and 128: whether a step whose longest row has `max_keys` keys takes it
// (SetFlashWgmma's mode), and its launch over `grid` (work items x KV heads).
bool FlashWgmmaOn(int64_t max_keys);
// Whether the wgmma kernel copies K/V by TMA: paged blocks of at least 8 slots (boxes of 8+ rows
// keep the 128-byte swizzle's 1024-byte pattern); smaller ones by cp.async.
constexpr bool WgmmaTma(int64_t block_size) { return block_size >= 8; }
// Consumer warpgroups (64 query rows each) a wgmma block at head dim hd: two, sharing the K/V
// tiles (H100, causal, 4K tokens: d128 271 against 261 TFLOP/s, 1K 165 against 125; d64 with TMA
// 168.5 against 164); d64 under cp.async keeps one, two blocks an SM, as measured before TMA.
constexpr int FlashWgmmaGroups(int64_t hd, bool tma) { return hd == 128 || tma ? 2 : 1; }
// Whether the wide shape of p's step runs on the wgmma kernel (its work items are then
// FlashWgmmaGroups x 64 rows).
inline bool WideOnWgmma(const PagedAttentionParams& p, int64_t max_keys) {
  return p.k_format.quant == KVQuant::kNone && FlashWgmmaOn(max_keys);
}
template <typename T, int HD>
void LaunchFlashWgmma(const KernelArgs& a, dim3 grid, cudaStream_t stream, bool pdl);

}  // namespace pagoda::cuda::flash
