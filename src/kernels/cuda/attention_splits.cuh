// The split-KV plan and merge the grouped SIMT attention kernels share (paged_attention.cu's
// grouped kernel and paged_attention_wide.cu's): a token's keys cut into GroupedAttentionSplits
// splits, a function of its own key count only, each split's online-softmax state (max m, sum
// l, unnormalized output o) merged in split order with explicit roundings, by MergeSplitsKernel
// (split mode: a block a split) or by a block walking its splits (the same bits); and the
// steps of their online softmax that must round alike (the warp reductions, a tile's fold into a
// head's state, a split's stored state).
// partial (split mode): [t][h][split] rows of HD values, then [t][h][split] (m, l) pairs, for
// kMaxAttentionSplits splits a head.
#pragma once

#include <cstdint>

#include "kernels/cuda/paged_attention.h"
#include "kernels/params/attention_params.h"

namespace pagoda::cuda {
// Internal linkage: each kernel file that includes this gets its own merge kernel (a __global__
// template instantiated in two translation units would otherwise share one host stub).
namespace {

// A token's keys and split `split` of them: [start, end).
struct KeyRange {
  int64_t start, end;
  int splits;
};
__device__ inline KeyRange SplitRange(const PagedAttentionParams& p, int64_t t, int split) {
  const int64_t pos = p.positions[t];
  const int64_t first = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int64_t keys = pos + 1 - first;
  KeyRange r;
  r.splits = GroupedAttentionSplits(keys);
  const int64_t chunk = (keys + r.splits - 1) / r.splits;
  r.start = first + split * chunk;
  r.end = pos + 1 < r.start + chunk ? pos + 1 : r.start + chunk;
  return r;
}

// (M, L, O) <- merge with (m, l, o), the next split in order. Explicit roundings: the split
// mode's merge kernel and the in-block walk must produce the same bits.
__device__ __forceinline__ void MergeInto(float& M, float& L, float* O, float m, float l, const float* o, int n,
                                          bool first) {
  if (first) {
    M = m;
    L = l;
    for (int i = 0; i < n; ++i) O[i] = o[i];
    return;
  }
  const float m_new = fmaxf(M, m);
  const float a = expf(M - m_new), b = expf(m - m_new);
  L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(l, b));
  for (int i = 0; i < n; ++i) O[i] = __fadd_rn(__fmul_rn(O[i], a), __fmul_rn(o[i], b));
  M = m_new;
}

// A warp's maximum and sum of x (butterfly: every lane gets the result, in the same order).
__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// A tile's keys folded into a head's running state (lane 0 of the head's warp, after the warp
// reduced the tile's exponentials against the new maximum m_new to `sum`): the factor the
// accumulators take (*corr), the sum (*l) and the maximum (*m, which held m_old).
__device__ __forceinline__ void FoldTile(float m_old, float m_new, float sum, float* m, float* l, float* corr) {
  const float c = expf(m_old - m_new);
  *corr = c;
  *l = *l * c + sum;
  *m = m_new;
}

// Split mode: a split's state of head h of token t, values [od, od + n): the output when the
// token has one split, else its unnormalized row (and, from the thread at od 0, its (m, l)).
__device__ __forceinline__ void StoreSplitState(const PagedAttentionParams& p, float* partial, int64_t t, int64_t h,
                                                int od, int split, int splits, const float* acc, int n, float m,
                                                float l, int hd) {
  if (splits == 1) {
    float* out = p.out + (t * p.num_heads + h) * hd + od;
    for (int i = 0; i < n; ++i) out[i] = __fdiv_rn(acc[i], l);
    return;
  }
  const int64_t at = (t * p.num_heads + h) * kMaxAttentionSplits + split;
  for (int i = 0; i < n; ++i) partial[at * hd + od + i] = acc[i];
  if (od == 0) {
    const int64_t ml = p.num_tokens * p.num_heads * kMaxAttentionSplits * hd + at * 2;
    partial[ml] = m;
    partial[ml + 1] = l;
  }
}

// Split mode's merge: tokens with several splits, (M, L, O) over the splits in order.
template <int HD>
__global__ void MergeSplitsKernel(PagedAttentionParams p, const float* partial) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const KeyRange range = SplitRange(p, t, 0);
  if (range.splits == 1) return;
  const int64_t at = (t * p.num_heads + h) * kMaxAttentionSplits;
  const float* ml = partial + p.num_tokens * p.num_heads * kMaxAttentionSplits * HD + at * 2;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float M = 0.0f, L = 0.0f, O = 0.0f;
    for (int s = 0; s < range.splits; ++s) {
      const float o = partial[(at + s) * HD + d];
      MergeInto(M, L, &O, ml[2 * s], ml[2 * s + 1], &o, 1, s == 0);
    }
    p.out[(t * p.num_heads + h) * HD + d] = __fdiv_rn(O, L);
  }
}

}  // namespace
}  // namespace pagoda::cuda
