// Paged attention over a quantized cache with the wide side pool (kernels/cuda/paged_attention.h:
// PagedAttentionWide): kivi2, and any per-token format with --kv-sink-tokens or
// --kv-recent-tokens. Each key is read where the CPU's KVReader reads it (kernels/cpu/attention.cc):
// its block's wide copy for positions < sink_tokens and, in the query's own block, for keys within
// recent_tokens of the query (all of them with own_block_wide, kivi2's residual); else its codes,
// dequantized as kv/kv_codec.cc does (DequantizeBlockValue). f32 arithmetic on the CPU's values.
//
// Head dims 64 and 128 with up to 16 query heads per KV head: the grouped kernel. A block serves
// (token, KV head, split) for the group's query heads: tiles of 32 keys dequantized by the block's
// threads into shared memory as f32 (each value read once for the group), scores and an online
// softmax per head, then p V. A token's keys are cut into GroupedAttentionSplits(keys) splits (a
// function of its own key count), merged in split order by a second kernel, so a token's bits do
// not depend on the batch. Other shapes: one block per (token, query head) over tiles of 128 keys.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cuda/attention_splits.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kv/kv_codec.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= 512

template <typename W>
__global__ void __launch_bounds__(kThreads) WideAttentionKernel(PagedAttentionParams p, BlockValueFormat kf,
                                                                BlockValueFormat vf, int64_t k_block_bytes,
                                                                int64_t v_block_bytes) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int hd = static_cast<int>(p.head_dim);
  const int64_t kv_h = h / (p.num_heads / p.num_kv_heads);
  const int64_t bs = p.block_size;
  extern __shared__ float smem[];
  float* q = smem;            // [head_dim]
  float* scores = smem + hd;  // [kThreads]
  __shared__ const uint8_t* v_src[kThreads];  // a key's wide V row, or its V block
  __shared__ int32_t v_offset[kThreads];      // -1: wide; else the key's offset in its block
  const float* q_row = p.q + (t * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  const int64_t start = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int32_t* table = p.block_tables[t];
  const auto* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const auto* v_cache = static_cast<const uint8_t*>(p.v_cache);
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  for (int64_t k0 = start; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t key = k0 + threadIdx.x;
      const int64_t block = table[key / bs], offset = key % bs;
      const int32_t w = p.wide_index != nullptr ? p.wide_index[block] : -1;
      const bool wide = w >= 0 && SidePoolKeyWide(p, key, pos);
      float dot = 0.0f;
      if (wide) {
        const int64_t index = ((static_cast<int64_t>(w) * bs + offset) * p.num_kv_heads + kv_h) * hd;
        const W* k = static_cast<const W*>(p.k_wide) + index;
        for (int d = 0; d < hd; ++d) dot = fmaf(q[d], ToFloat(k[d]), dot);
        v_src[threadIdx.x] = reinterpret_cast<const uint8_t*>(static_cast<const W*>(p.v_wide) + index);
        v_offset[threadIdx.x] = -1;
      } else {
        const uint8_t* k = k_cache + block * k_block_bytes;
        for (int d = 0; d < hd; ++d) {
          dot = fmaf(q[d], DequantizeBlockValue(kf, k, static_cast<int>(offset), static_cast<int>(kv_h), d), dot);
        }
        v_src[threadIdx.x] = v_cache + block * v_block_bytes;
        v_offset[threadIdx.x] = static_cast<int32_t>(offset);
      }
      scores[threadIdx.x] = dot * p.scale;
    }
    __syncthreads();
    state.AddTile(scores, n, hd, [&](int j, int d) {
      return v_offset[j] < 0 ? ToFloat(reinterpret_cast<const W*>(v_src[j])[d])
                             : DequantizeBlockValue(vf, v_src[j], v_offset[j], static_cast<int>(kv_h), d);
    });
  }
  state.Store(p.out + (t * p.num_heads + h) * hd, hd);
}

// Where key `key` of a query at `pos` is read: its wide row (element index into the wide arrays,
// *offset = -1) or its block (the block id, *offset = the key's offset in it).
__device__ __forceinline__ int64_t KeySource(const PagedAttentionParams& p, const int32_t* table, int64_t key,
                                             int64_t pos, int64_t kvh, int32_t* offset) {
  const int64_t bs = p.block_size;
  const int64_t block = table[key / bs], o = key % bs;
  const int32_t w = p.wide_index != nullptr ? p.wide_index[block] : -1;
  if (w >= 0 && SidePoolKeyWide(p, key, pos)) {
    *offset = -1;
    return ((static_cast<int64_t>(w) * bs + o) * p.num_kv_heads + kvh) * p.head_dim;
  }
  *offset = static_cast<int32_t>(o);
  return block;
}

// The grouped kernel's modes: a block per split (then MergeSplitsKernel), a block walking its
// token's splits, or a block attending the keys FlashAttention left (the rest of a query's keys
// besides its codes span, at most two ranges) and merging FlashAttention's row into its own.
enum WideMode { kWideSplit, kWideWalk, kWideRest };

// kWideRest's ranges (SidePoolRestRanges); `splits` counts them (0: FlashAttention's row is the
// whole output).
__device__ inline KeyRange RestRange(const PagedAttentionParams& p, int64_t t, int part) {
  const int64_t pos = p.positions[t];
  const SidePoolRest rest = SidePoolRestRanges(p, AttentionWindowStart(pos, p.sliding_window), pos);
  KeyRange r;
  r.splits = rest.count;
  r.start = rest.start[part < 1 ? 0 : 1];
  r.end = rest.end[part < 1 ? 0 : 1];
  return r;
}

constexpr int kGroupThreads = 128;
constexpr int kTile = 32;  // keys a tile
// At most this many tokens: a block per split and a merge kernel; more: each block walks its
// token's splits and merges as it goes (the same operations in the same order).
constexpr int64_t kSplitModeMaxTokens = 64;

// Split mode: block (t, kvh, split); partial holds [t][h][split] rows of HD values, then
// [t][h][split] (m, l) pairs; a token with one split writes its output. In-block mode: block
// (t, kvh) walks the splits.
template <typename W, int HD, int G, int kMode>
__global__ void __launch_bounds__(kGroupThreads) WideGroupedKernel(PagedAttentionParams p, BlockValueFormat kf,
                                                                   BlockValueFormat vf, int64_t k_block_bytes,
                                                                   int64_t v_block_bytes, float* partial) {
  constexpr int kOut = G * HD / kGroupThreads > 0 ? G * HD / kGroupThreads : 1;
  __shared__ float q_s[G][HD];
  __shared__ float k_s[kTile][HD + 1];
  __shared__ float v_s[kTile][HD];
  __shared__ float p_s[G][kTile];
  __shared__ float m_s[G], l_s[G], corr_s[G];
  __shared__ int64_t src_s[kTile];
  __shared__ int32_t off_s[kTile];
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = static_cast<int>(p.num_heads / p.num_kv_heads);  // <= G
  constexpr bool kSplitMode = kMode == kWideSplit;
  auto range_of = [&](int split) { return kMode == kWideRest ? RestRange(p, t, split) : SplitRange(p, t, split); };
  const int first_split = kSplitMode ? blockIdx.z : 0;
  const int splits = range_of(0).splits;
  if (first_split >= splits) return;
  const int last_split = kSplitMode ? first_split : splits - 1;
  for (int i = tid; i < G * HD; i += kGroupThreads) {
    const int g = i / HD;
    q_s[g][i % HD] = g < group ? p.q[(t * p.num_heads + static_cast<int64_t>(kvh) * group + g) * HD + i % HD] : 0.0f;
  }
  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  const auto* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const auto* v_cache = static_cast<const uint8_t*>(p.v_cache);
  const W* k_wide = static_cast<const W*>(p.k_wide);
  const W* v_wide = static_cast<const W*>(p.v_wide);
  const int o_index = tid * kOut, og = o_index / HD, od = o_index % HD;
  const bool owns_output = o_index < G * HD && og < group;
  float acc[kOut], O[kOut], M = 0.0f, L = 0.0f;
  for (int split = first_split; split <= last_split; ++split) {
    const KeyRange range = range_of(split);
#pragma unroll
    for (int i = 0; i < kOut; ++i) acc[i] = 0.0f;
    __syncthreads();  // the last split's m_s and l_s are read
    if (tid < G) {
      m_s[tid] = -FLT_MAX;
      l_s[tid] = 0.0f;
    }
    for (int64_t k0 = range.start; k0 < range.end; k0 += kTile) {
      const int n = static_cast<int>(range.end - k0 < kTile ? range.end - k0 : kTile);
      __syncthreads();  // the previous tile is used up
      if (tid < n) src_s[tid] = KeySource(p, table, k0 + tid, pos, kvh, &off_s[tid]);
      __syncthreads();
      // The tile's K and V values as f32, consecutive threads on consecutive values of a row.
      for (int e = tid; e < n * HD; e += kGroupThreads) {
        const int j = e / HD, d = e % HD;
        const int64_t src = src_s[j];
        const int32_t off = off_s[j];
        if (off < 0) {
          k_s[j][d] = ToFloat(k_wide[src + d]);
          v_s[j][d] = ToFloat(v_wide[src + d]);
        } else {
          k_s[j][d] = DequantizeBlockValue(kf, k_cache + src * k_block_bytes, off, kvh, d);
          v_s[j][d] = DequantizeBlockValue(vf, v_cache + src * v_block_bytes, off, kvh, d);
        }
      }
      __syncthreads();
      // Scores: (head g, key j) pairs, a warp a head.
      for (int e = tid; e < G * kTile; e += kGroupThreads) {
        const int g = e / kTile, j = e % kTile;
        if (g < group && j < n) {
          float dot = 0.0f;
#pragma unroll 8
          for (int d = 0; d < HD; ++d) dot = fmaf(q_s[g][d], k_s[j][d], dot);
          p_s[g][j] = dot * p.scale;
        }
      }
      __syncthreads();
      // Online softmax, a warp per head (a tile is one key a lane).
      for (int g = warp; g < group; g += kGroupThreads / 32) {
        const float x = lane < n ? p_s[g][lane] : -FLT_MAX;
        const float m_old = m_s[g], m_new = fmaxf(m_old, WarpMax(x));
        const float ex = lane < n ? expf(x - m_new) : 0.0f;
        if (lane < n) p_s[g][lane] = ex;
        const float sum = WarpSum(ex);
        __syncwarp();
        if (lane == 0) FoldTile(m_old, m_new, sum, &m_s[g], &l_s[g], &corr_s[g]);
      }
      __syncthreads();
      if (owns_output) {
        const float c = corr_s[og];
#pragma unroll
        for (int i = 0; i < kOut; ++i) acc[i] *= c;
        for (int j = 0; j < n; ++j) {
          const float pj = p_s[og][j];
#pragma unroll
          for (int i = 0; i < kOut; ++i) acc[i] = fmaf(pj, v_s[j][od + i], acc[i]);
        }
      }
    }
    __syncthreads();  // m_s and l_s final for the split
    if (!owns_output) continue;
    const int64_t h = static_cast<int64_t>(kvh) * group + og;
    if constexpr (kSplitMode) {
      StoreSplitState(p, partial, t, h, od, split, splits, acc, kOut, m_s[og], l_s[og], HD);
    } else {
      MergeInto(M, L, O, m_s[og], l_s[og], acc, kOut, split == 0);
    }
  }
  if constexpr (!kSplitMode) {
    if (owns_output) {
      const int64_t row = t * p.num_heads + static_cast<int64_t>(kvh) * group + og;
      float* out = p.out + row * HD + od;
      if constexpr (kMode == kWideRest) {
        // FlashAttention's normalized row over the codes span, as a state of sum 1 at its
        // log-sum-exp (natural log), merged after this block's ranges.
        const int64_t pos = p.positions[t];
        if (!SidePoolCodesSpan(p, AttentionWindowStart(pos, p.sliding_window), pos).empty()) {
          float o[kOut];
#pragma unroll
          for (int i = 0; i < kOut; ++i) o[i] = out[i];
          MergeInto(M, L, O, p.lse[row] * 0.6931471805599453f, 1.0f, o, kOut, false);
        }
      }
#pragma unroll
      for (int i = 0; i < kOut; ++i) out[i] = __fdiv_rn(O[i], L);
    }
  }
}

template <typename W, int HD, int G>
void LaunchWideGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, int64_t kb, int64_t vb,
                       cudaStream_t stream) {
  if (p.num_tokens <= kSplitModeMaxTokens) {
    const int splits = GroupedAttentionSplits(max_keys);
    const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads),
                    static_cast<unsigned>(splits));
    WideGroupedKernel<W, HD, G, kWideSplit><<<grid, kGroupThreads, 0, stream>>>(p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb, scratch);
    PAGODA_CUDA_CHECK_LAUNCH("WideGroupedKernel");
    if (splits > 1) {
      MergeSplitsKernel<HD><<<dim3(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads)), HD, 0,
                            stream>>>(p, scratch);
      PAGODA_CUDA_CHECK_LAUNCH("MergeSplitsKernel");
    }
    return;
  }
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads));
  WideGroupedKernel<W, HD, G, kWideWalk><<<grid, kGroupThreads, 0, stream>>>(p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb, scratch);
  PAGODA_CUDA_CHECK_LAUNCH("WideGroupedKernel");
}

// f.template operator()<G>() for the kernels' group size G covering p's query heads per KV head.
template <typename F>
void ForGroup(const PagedAttentionParams& p, F&& f) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  if (group == 1) return f.template operator()<1>();
  if (group == 2) return f.template operator()<2>();
  if (group <= 4) return f.template operator()<4>();
  if (group <= 8) return f.template operator()<8>();
  f.template operator()<16>();
}

template <typename W>
void LaunchRest(const PagedAttentionParams& p, int64_t kb, int64_t vb, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads));
  auto launch = [&]<int HD>() {
    ForGroup(p, [&]<int G>() {
      WideGroupedKernel<W, HD, G, kWideRest><<<grid, kGroupThreads, 0, stream>>>(
          p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb, nullptr);
    });
  };
  p.head_dim == 128 ? launch.template operator()<128>() : launch.template operator()<64>();
  PAGODA_CUDA_CHECK_LAUNCH("WideGroupedKernel (rest)");
}

template <typename W>
bool TryWideGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, int64_t kb, int64_t vb,
                    cudaStream_t stream) {
  if (scratch == nullptr || p.num_heads / p.num_kv_heads > 16 || p.num_tokens > 2147483647) return false;
  if (p.head_dim != 128 && p.head_dim != 64) return false;
  auto launch = [&]<int HD>() {
    ForGroup(p, [&]<int G>() { LaunchWideGrouped<W, HD, G>(p, max_keys, scratch, kb, vb, stream); });
  };
  p.head_dim == 128 ? launch.template operator()<128>() : launch.template operator()<64>();
  return true;
}

}  // namespace

int64_t PagedAttentionWideScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  // Only split mode (at most kSplitModeMaxTokens tokens) writes partial states.
  return std::min(num_tokens, kSplitModeMaxTokens) * num_heads * kMaxAttentionSplits * (head_dim + 2);
}

namespace {
bool side_pool_flash = EnvSwitch("PAGODA_SIDE_POOL_FLASH", true);
}  // namespace

bool SidePoolFlashOn() { return side_pool_flash; }
void SetSidePoolFlash(bool on) { side_pool_flash = on; }

bool PagedAttentionWideRestServes(const PagedAttentionParams& p) {
  return (p.head_dim == 64 || p.head_dim == 128) && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0 &&
         p.num_heads / p.num_kv_heads <= 16 && p.block_size > 0 && p.k_format.heavy_rows == 0 &&
         p.v_format.heavy_rows == 0 &&
         (p.wide_dtype == DType::kF32 || p.wide_dtype == DType::kBF16 || p.wide_dtype == DType::kF16);
}

void PagedAttentionWideRest(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(PagedAttentionWideRestServes(p) && p.codes_only && p.lse != nullptr)
      << "CUDA PagedAttentionWideRest: unsupported shape";
  PAGODA_CHECK(p.num_tokens <= 2147483647) << "CUDA PagedAttentionWideRest: too many tokens in one launch";
  const int64_t kb = KVBlockBytes(p.k_format), vb = KVBlockBytes(p.v_format);
  switch (p.wide_dtype) {
    case DType::kF32: return LaunchRest<float>(p, kb, vb, stream);
    case DType::kBF16: return LaunchRest<__nv_bfloat16>(p, kb, vb, stream);
    default: return LaunchRest<__half>(p, kb, vb, stream);
  }
}

void PagedAttentionWide(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim <= kThreads * kMaxPerThread) << "CUDA PagedAttentionWide: head_dim " << p.head_dim;
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0 && p.num_heads <= 65535)
      << "CUDA PagedAttentionWide: head counts " << p.num_heads << "/" << p.num_kv_heads;
  PAGODA_CHECK(p.k_format.quant != KVQuant::kNone && p.v_format.quant != KVQuant::kNone &&
               p.k_format.heavy_rows == 0 && p.v_format.heavy_rows == 0)
      << "CUDA PagedAttentionWide: quantized K and V arrays without heavy rows";
  PAGODA_CHECK(p.num_tokens <= 2147483647) << "CUDA PagedAttentionWide: too many tokens in one launch";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.head_dim + kThreads) * sizeof(float);
  const int64_t kb = KVBlockBytes(p.k_format), vb = KVBlockBytes(p.v_format);
  bool done = false;
  switch (p.wide_dtype) {
    case DType::kF32: done = TryWideGrouped<float>(p, max_keys, scratch, kb, vb, stream); break;
    case DType::kBF16: done = TryWideGrouped<__nv_bfloat16>(p, max_keys, scratch, kb, vb, stream); break;
    case DType::kF16: done = TryWideGrouped<__half>(p, max_keys, scratch, kb, vb, stream); break;
    default: break;
  }
  if (done) return;
  switch (p.wide_dtype) {
    case DType::kF32: WideAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb); break;
    case DType::kBF16: WideAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb); break;
    case DType::kF16: WideAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p, MakeBlockValueFormat(p.k_format), MakeBlockValueFormat(p.v_format), kb, vb); break;
    default: ThrowUnsupported("CUDA PagedAttentionWide: wide element type " + std::string(DTypeName(p.wide_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("WideAttentionKernel");
}

}  // namespace pagoda::cuda
