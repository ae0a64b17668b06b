#include "kernels/cuda/paged_attention.h"

#include <cfloat>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= 512

template <typename T>
__global__ void PagedAttentionKernel(PagedAttentionParams p) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int hd = static_cast<int>(p.head_dim);
  const int64_t kv_h = h / (p.num_heads / p.num_kv_heads);
  extern __shared__ float smem[];
  float* q = smem;              // [head_dim]
  float* scores = smem + hd;    // [kThreads]
  const float* q_row = p.q + (t * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  // AttentionWindowStart (attention_params.h), which is host-only.
  const int64_t start = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int32_t* table = p.block_tables[t];
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  const int64_t row = p.num_kv_heads * hd;  // elements per slot
  auto slot_of = [&](int64_t key_pos) {
    return static_cast<int64_t>(table[key_pos / p.block_size]) * p.block_size + key_pos % p.block_size;
  };
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  __shared__ int64_t slots[kThreads];
  for (int64_t k0 = start; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t slot = slot_of(k0 + threadIdx.x);
      slots[threadIdx.x] = slot;
      const T* k = k_cache + slot * row + kv_h * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q[d] * ToFloat(k[d]);
      scores[threadIdx.x] = dot * p.scale;
    }
    __syncthreads();
    state.AddTile(scores, n, hd, [&](int j, int d) { return ToFloat(v_cache[slots[j] * row + kv_h * hd + d]); });
  }
  state.Store(p.out + (t * p.num_heads + h) * hd, hd);
}


// ---- the grouped split-KV kernel ----

constexpr int kGroupThreads = 128;  // 4 warps; a tile is 128 keys
constexpr int kLargestGroup = 8;

__device__ inline void Load8(const float* p, float* v) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ inline void Load8(const __nv_bfloat16* p, float* v) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ inline void Load8(const __half* p, float* v) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
// N consecutive elements (N = 2 or 4) as floats.
template <int N, typename T>
__device__ inline void LoadN(const T* p, float* v) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = ToFloat(p[i]);
}

// A token's keys [start, pos] and the range of split `split` of them.
struct KeyRange {
  int64_t start, end;  // [start, end)
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

// kMaxGroup: the group size rounded up to 1, 2, 4 or 8 (registers and shared memory scale with
// it); `group` <= kMaxGroup is the real one.
template <typename T, int HD, int kMaxGroup>
__global__ void __launch_bounds__(kGroupThreads) GroupedAttentionKernel(PagedAttentionParams p, float* partial) {
  constexpr int kPerLane = HD / 32;  // dimensions a lane owns in the p*V phase
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const KeyRange range = SplitRange(p, t, split);
  if (split >= range.splits) return;
  const int group = static_cast<int>(p.num_heads / p.num_kv_heads);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  __shared__ __align__(16) float q_s[kMaxGroup][HD];
  __shared__ float p_s[kMaxGroup][kGroupThreads];
  __shared__ int64_t slot_s[kGroupThreads];
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup], corr_s[kMaxGroup];
  for (int i = tid; i < group * HD; i += kGroupThreads) {
    q_s[i / HD][i % HD] = p.q[(t * p.num_heads + static_cast<int64_t>(kvh) * group + i / HD) * HD + i % HD];
  }
  if (tid < kMaxGroup) {
    m_s[tid] = -FLT_MAX;
    l_s[tid] = 0.0f;
  }
  __syncthreads();

  const int32_t* table = p.block_tables[t];
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  const int64_t row = p.num_kv_heads * HD;  // elements per slot
  float acc[kMaxGroup][kPerLane];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[g][i] = 0.0f;

  for (int64_t k0 = range.start; k0 < range.end; k0 += kGroupThreads) {
    const int n = static_cast<int>(range.end - k0 < kGroupThreads ? range.end - k0 : kGroupThreads);
    // Scores: thread tid takes key k0 + tid, every head of the group.
    if (tid < n) {
      const int64_t key = k0 + tid;
      const int64_t slot = static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
      slot_s[tid] = slot;
      const T* k = k_cache + slot * row + static_cast<int64_t>(kvh) * HD;
      float dot[kMaxGroup] = {};
#pragma unroll
      for (int c = 0; c < HD; c += 8) {
        float kv[8];
        Load8(k + c, kv);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < group) {
#pragma unroll
            for (int e = 0; e < 8; ++e) dot[g] = fmaf(q_s[g][c + e], kv[e], dot[g]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < group) p_s[g][tid] = dot[g] * p.scale;
      }
    }
    __syncthreads();
    // Online softmax, one warp per head.
    for (int g = warp; g < group; g += kGroupThreads / 32) {
      float mx = -FLT_MAX;
      for (int j = lane; j < n; j += 32) mx = fmaxf(mx, p_s[g][j]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float e = expf(p_s[g][j] - m_new);
        p_s[g][j] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        const float corr = expf(m_old - m_new);
        corr_s[g] = corr;
        l_s[g] = l_s[g] * corr + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    // p * V: warp w adds keys [32 w, 32 w + 32) of the tile; lane owns kPerLane dimensions.
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < group) {
        const float c = corr_s[g];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[g][i] *= c;
      }
    }
    // Eight V rows in flight per warp, then their products added in key order.
    const int j_end = min(n, warp * 32 + 32);
    for (int j0 = warp * 32; j0 < j_end; j0 += 8) {
      float v[8][kPerLane];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (j0 + u < j_end) {
          LoadN<kPerLane>(v_cache + slot_s[j0 + u] * row + static_cast<int64_t>(kvh) * HD + lane * kPerLane, v[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (j0 + u >= j_end) break;
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < group) {
            const float pj = p_s[g][j0 + u];
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) acc[g][i] = fmaf(pj, v[u][i], acc[g][i]);
          }
        }
      }
    }
    __syncthreads();  // p_s and slot_s are read before the next tile writes them
  }

  // The four warps' sums, added in warp order (reusing q_s's space is not enough: own buffer).
  __shared__ float red_s[kGroupThreads / 32][kMaxGroup][HD];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g < group) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) red_s[warp][g][lane * kPerLane + i] = acc[g][i];
    }
  }
  __syncthreads();
  for (int i = tid; i < group * HD; i += kGroupThreads) {
    const int g = i / HD, d = i % HD;
    float o = red_s[0][g][d];
#pragma unroll
    for (int w = 1; w < kGroupThreads / 32; ++w) o += red_s[w][g][d];
    const int64_t h = static_cast<int64_t>(kvh) * group + g;
    if (range.splits == 1) {
      p.out[(t * p.num_heads + h) * HD + d] = o / l_s[g];
    } else {
      // partial: [t][h][split] rows of HD values, then [t][h][split] (m, l) pairs after all rows.
      const int64_t at = (t * p.num_heads + h) * kMaxAttentionSplits + split;
      partial[at * HD + d] = o;
      if (d == 0) {
        const int64_t ml = p.num_tokens * p.num_heads * kMaxAttentionSplits * HD + at * 2;
        partial[ml] = m_s[g];
        partial[ml + 1] = l_s[g];
      }
    }
  }
}

// Tokens with several splits: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M), s in order.
template <int HD>
__global__ void MergeSplitsKernel(PagedAttentionParams p, const float* partial) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const KeyRange range = SplitRange(p, t, 0);
  if (range.splits == 1) return;
  const int64_t at = (t * p.num_heads + h) * kMaxAttentionSplits;
  const float* ml = partial + p.num_tokens * p.num_heads * kMaxAttentionSplits * HD + at * 2;
  float mx = -FLT_MAX;
  for (int s = 0; s < range.splits; ++s) mx = fmaxf(mx, ml[2 * s]);
  float l = 0.0f;
  for (int s = 0; s < range.splits; ++s) l += ml[2 * s + 1] * expf(ml[2 * s] - mx);
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < range.splits; ++s) o += partial[(at + s) * HD + d] * expf(ml[2 * s] - mx);
    p.out[(t * p.num_heads + h) * HD + d] = o / l;
  }
}

template <typename T, int HD>
void LaunchGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  const int splits = GroupedAttentionSplits(max_keys);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(splits));
  const int64_t group = p.num_heads / p.num_kv_heads;
  if (group == 1) {
    GroupedAttentionKernel<T, HD, 1><<<grid, kGroupThreads, 0, stream>>>(p, scratch);
  } else if (group == 2) {
    GroupedAttentionKernel<T, HD, 2><<<grid, kGroupThreads, 0, stream>>>(p, scratch);
  } else if (group <= 4) {
    GroupedAttentionKernel<T, HD, 4><<<grid, kGroupThreads, 0, stream>>>(p, scratch);
  } else {
    GroupedAttentionKernel<T, HD, 8><<<grid, kGroupThreads, 0, stream>>>(p, scratch);
  }
  PAGODA_CUDA_CHECK_LAUNCH("GroupedAttentionKernel");
  if (splits > 1) {
    MergeSplitsKernel<HD><<<dim3(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads)), HD, 0,
                            stream>>>(p, scratch);
    PAGODA_CUDA_CHECK_LAUNCH("MergeSplitsKernel");
  }
}

template <typename T>
bool TryGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_heads / p.num_kv_heads > kLargestGroup || p.num_tokens > 2147483647) return false;
  if (p.head_dim == 128) {
    LaunchGrouped<T, 128>(p, max_keys, scratch, stream);
  } else if (p.head_dim == 64) {
    LaunchGrouped<T, 64>(p, max_keys, scratch, stream);
  } else {
    return false;
  }
  return true;
}

}  // namespace

int64_t PagedAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  return num_tokens * num_heads * kMaxAttentionSplits * (head_dim + 2);
}

void PagedAttention(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim <= kThreads * kMaxPerThread) << "CUDA PagedAttention: head_dim " << p.head_dim << " > 512";
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0) << "CUDA PagedAttention: head counts";
  PAGODA_CHECK(p.num_heads <= 65535) << "CUDA PagedAttention: too many heads";
  bool done = false;
  switch (p.kv_dtype) {
    case DType::kF32: done = TryGrouped<float>(p, max_keys, scratch, stream); break;
    case DType::kBF16: done = TryGrouped<__nv_bfloat16>(p, max_keys, scratch, stream); break;
    case DType::kF16: done = TryGrouped<__half>(p, max_keys, scratch, stream); break;
    default: break;
  }
  if (done) return;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.head_dim + kThreads) * sizeof(float);
  switch (p.kv_dtype) {
    case DType::kF32: PagedAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kBF16: PagedAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kF16: PagedAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p); break;
    default: ThrowUnsupported("CUDA PagedAttention: KV element type " + std::string(DTypeName(p.kv_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("PagedAttentionKernel");
}

}  // namespace pagoda::cuda
