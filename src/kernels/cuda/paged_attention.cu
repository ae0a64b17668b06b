#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/attention_splits.cuh"
#include "kernels/cuda/smem_limit.cuh"

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
  // Rows of (slot, KV head): plain elements of T ([slot][head]) or a quantized format
  // (kernels/cuda/kv_codec.cuh: head-major within a block).
  auto row_index = [&](int64_t slot) {
    return KVRowTraits<T>::kQuantized ? DeviceKVRowIndex(slot, kv_h, p.num_kv_heads, p.block_size)
                                      : slot * p.num_kv_heads + kv_h;
  };
  const auto* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const auto* v_cache = static_cast<const uint8_t*>(p.v_cache);
  const int64_t k_row = KVRowTraits<T>::kQuantized ? DeviceKVRowBytes(p.k_format) : hd * int64_t(sizeof(T));
  const int64_t v_row = KVRowTraits<T>::kQuantized ? DeviceKVRowBytes(p.v_format) : hd * int64_t(sizeof(T));
  const int64_t k_group = p.k_format.group < hd ? p.k_format.group : hd;
  const int64_t v_group = p.v_format.group < hd ? p.v_format.group : hd;
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
      const uint8_t* k = k_cache + row_index(slot) * k_row;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q[d] * DequantizeAt<T>(k, d, hd, k_group);
      scores[threadIdx.x] = dot * p.scale;
    }
    __syncthreads();
    state.AddTile(scores, n, hd, [&](int j, int d) {
      return DequantizeAt<T>(v_cache + row_index(slots[j]) * v_row, d, hd, v_group);
    });
  }
  state.Store(p.out + (t * p.num_heads + h) * hd, hd);
}


// ---- the grouped kernel ----
//
// One block of 128 threads serves (token, KV head) for the group's G query heads. Keys come in
// tiles of kTile rows of K and V copied into shared memory with cp.async (two stages: the next
// tile loads while this one is used). A token's keys are cut into GroupedAttentionSplits(keys)
// splits; each split's online-softmax state (max m, sum l, unnormalized output o) is computed
// the same way in both modes and the states are merged in split order by MergeState:
//   split mode (few tokens): block z computes split z and writes its state; MergeSplitsKernel
//     merges them;
//   in-block mode (many tokens): the block walks every split and merges as it goes.
// Same operations in the same order, so the same bits whichever mode a step uses.

constexpr int kGroupThreads = 128;
constexpr int kLargestGroup = 8;
// Tokens at most this many, and blocks (tokens x KV heads) under this many: split mode.
constexpr int64_t kSplitModeMaxTokens = 64;
constexpr int64_t kSplitModeMaxBlocks = 264;

// n consecutive elements as floats (n = 1, 2, 4 or 8; 16-byte aligned for 8 two-byte values).
template <int N>
__device__ inline void LoadFloats(const float* p, float* v) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = p[i];
}
template <int N>
__device__ inline void LoadFloats(const __nv_bfloat16* p, float* v) {
  if constexpr (N == 8 || N == 4) {  // one 16- or 8-byte load, widened by shifts
    uint32_t w[N / 2];
    if constexpr (N == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    }
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __bfloat162float(p[i]);
  }
}
template <int N>
__device__ inline void LoadFloats(const __half* p, float* v) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = __half2float(p[i]);
}

template <typename T, int HD, int G>
struct GroupedShape {
  static constexpr bool kQuantized = KVRowTraits<T>::kQuantized;
  // Bytes per value the shared-memory rows are sized for: quantized rows (codes and scales)
  // fit in 2 bytes per value.
  static constexpr int kElemBytes = kQuantized ? 2 : int(sizeof(T));
  // Keys per tile: a K (or V) tile is at most 16 KiB.
  static constexpr int kTile = 16384 / (HD * kElemBytes) < 64 ? 16384 / (HD * kElemBytes) : 64;
  // A K/V row in shared memory, padded by 16 bytes so threads reading different rows at the
  // same column fall in different banks.
  static constexpr int kRowBytes = HD * kElemBytes + 16;
  static constexpr int kTileBytes = kTile * kRowBytes;
  // Outputs (head g, dimension d) a thread accumulates: G * HD over 128 threads, at least 1.
  static constexpr int kOut = G * HD / kGroupThreads > 0 ? G * HD / kGroupThreads : 1;
  static constexpr int kSmem = 2 * 2 * kTileBytes;  // K and V, two stages
};

template <typename T, int HD, int G, bool kSplitMode>
__global__ void __launch_bounds__(kGroupThreads) GroupedAttentionKernel(PagedAttentionParams p, float* partial) {
  using S = GroupedShape<T, HD, G>;
  constexpr int kTile = S::kTile, kOut = S::kOut;
  extern __shared__ __align__(16) float dynamic_smem[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(dynamic_smem);
  __shared__ __align__(16) float q_s[G][HD];
  __shared__ float p_s[G][kTile];
  __shared__ float m_s[G], l_s[G], corr_s[G];
  __shared__ float M_s[G], L_s[G];

  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = static_cast<int>(p.num_heads / p.num_kv_heads);  // <= G
  const int first_split = kSplitMode ? blockIdx.z : 0;
  KeyRange range = SplitRange(p, t, first_split);
  if (kSplitMode && first_split >= range.splits) return;
  const int last_split = kSplitMode ? first_split : range.splits - 1;

  for (int i = tid; i < G * HD; i += kGroupThreads) {
    const int g = i / HD;
    q_s[g][i % HD] = g < group ? p.q[(t * p.num_heads + static_cast<int64_t>(kvh) * group + g) * HD + i % HD] : 0.0f;
  }
  const int32_t* table = p.block_tables[t];
  const int bs_shift = __ffs(static_cast<int>(p.block_size)) - 1;  // block sizes are powers of two
  const int bs_mask = static_cast<int>(p.block_size) - 1;
  // Quantized rows: the same bytes per row in K and V (one format), copied in 4-byte pieces.
  const int row_bytes = S::kQuantized ? static_cast<int>(DeviceKVRowBytes(p.k_format)) : HD * int(sizeof(T));
  const int qgroup = S::kQuantized && p.k_format.group < HD ? static_cast<int>(p.k_format.group) : HD;
  // Row (slot, kvh)'s first byte: [slot][head] rows, or a quantized block's head-major ones.
  auto row_at = [&](int64_t slot) {
    return (S::kQuantized ? DeviceKVRowIndex(slot, kvh, p.num_kv_heads, p.block_size) : slot * p.num_kv_heads + kvh) *
           row_bytes;
  };
  const char* k_base = static_cast<const char*>(p.k_cache);
  const char* v_base = static_cast<const char*>(p.v_cache);
  constexpr int kPiece = S::kQuantized ? 4 : 16;
  const int chunks = row_bytes / kPiece;  // pieces of a row

  // Copies keys [k0, k0 + n) of K and V into stage `stage`.
  auto load_tile = [&](int stage, int64_t k0, int n) {
    uint8_t* ks = smem + stage * 2 * S::kTileBytes;
    uint8_t* vs = ks + S::kTileBytes;
    for (int i = tid; i < n * chunks; i += kGroupThreads) {
      const int r = i / chunks, c = i % chunks;
      const int64_t key = k0 + r;
      const int64_t at = row_at(static_cast<int64_t>(table[key >> bs_shift]) * p.block_size + (key & bs_mask));
      if constexpr (S::kQuantized) {
        CpAsync4(ks + r * S::kRowBytes + c * 4, k_base + at + c * 4);
        CpAsync4(vs + r * S::kRowBytes + c * 4, v_base + at + c * 4);
      } else {
        CpAsync16(ks + r * S::kRowBytes + c * 16, k_base + at + c * 16);
        CpAsync16(vs + r * S::kRowBytes + c * 16, v_base + at + c * 16);
      }
    }
  };

  // The output this thread accumulates: head og, dimensions [od, od + kOut).
  const int o_index = tid * kOut;
  const int og = o_index / HD, od = o_index % HD;
  const bool owns_output = o_index < G * HD && og < group;
  float acc[kOut], O[kOut];
#pragma unroll
  for (int i = 0; i < kOut; ++i) O[i] = 0.0f;

  for (int split = first_split; split <= last_split; ++split) {
    range = SplitRange(p, t, split);
#pragma unroll
    for (int i = 0; i < kOut; ++i) acc[i] = 0.0f;
    if (tid < G) {
      m_s[tid] = -FLT_MAX;
      l_s[tid] = 0.0f;
    }
    const int num_tiles = static_cast<int>((range.end - range.start + kTile - 1) / kTile);
    load_tile(0, range.start, static_cast<int>(range.end - range.start < kTile ? range.end - range.start : kTile));
    CpAsyncCommit();
    for (int it = 0; it < num_tiles; ++it) {
      const int64_t k0 = range.start + static_cast<int64_t>(it) * kTile;
      const int n = static_cast<int>(range.end - k0 < kTile ? range.end - k0 : kTile);
      if (it + 1 < num_tiles) {
        const int64_t k1 = k0 + kTile;
        load_tile((it + 1) & 1, k1, static_cast<int>(range.end - k1 < kTile ? range.end - k1 : kTile));
      }
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncthreads();
      const uint8_t* ks = smem + (it & 1) * 2 * S::kTileBytes;
      const uint8_t* vs = ks + S::kTileBytes;
      // Scores: thread j takes key j for every head of the group (one read of the K row).
      if (tid < n) {
        const uint8_t* k_row = ks + tid * S::kRowBytes;
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; ++g) dot[g] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < HD; d += 8) {
          float kv[8];
          if constexpr (S::kQuantized) {
            DequantizeRun<8, HD>(k_row, d, qgroup, kv, T{});
          } else {
            LoadFloats<8>(reinterpret_cast<const T*>(k_row) + d, kv);
          }
#pragma unroll
          for (int g = 0; g < G; ++g) {
            const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][d]);
            const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][d + 4]);
            dot[g] = fmaf(qa.x, kv[0], dot[g]);
            dot[g] = fmaf(qa.y, kv[1], dot[g]);
            dot[g] = fmaf(qa.z, kv[2], dot[g]);
            dot[g] = fmaf(qa.w, kv[3], dot[g]);
            dot[g] = fmaf(qb.x, kv[4], dot[g]);
            dot[g] = fmaf(qb.y, kv[5], dot[g]);
            dot[g] = fmaf(qb.z, kv[6], dot[g]);
            dot[g] = fmaf(qb.w, kv[7], dot[g]);
          }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
          if (g < group) p_s[g][tid] = dot[g] * p.scale;
        }
      }
      __syncthreads();
      // Online softmax, a warp per head.
      for (int g = warp; g < group; g += kGroupThreads / 32) {
        float mx = -FLT_MAX;
        for (int j = lane; j < n; j += 32) mx = fmaxf(mx, p_s[g][j]);
        mx = WarpMax(mx);
        const float m_old = m_s[g], m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
        for (int j = lane; j < n; j += 32) {
          const float e = expf(p_s[g][j] - m_new);
          p_s[g][j] = e;
          sum += e;
        }
        sum = WarpSum(sum);
        __syncwarp();
        if (lane == 0) FoldTile(m_old, m_new, sum, &m_s[g], &l_s[g], &corr_s[g]);
      }
      __syncthreads();
      // p V for this thread's outputs, keys in order.
      if (owns_output) {
        const float c = corr_s[og];
#pragma unroll
        for (int i = 0; i < kOut; ++i) acc[i] *= c;
        for (int j = 0; j < n; ++j) {
          float v[kOut];
          if constexpr (S::kQuantized) {
            DequantizeRun<kOut, HD>(vs + j * S::kRowBytes, od, qgroup, v, T{});
          } else {
            LoadFloats<kOut>(reinterpret_cast<const T*>(vs + j * S::kRowBytes) + od, v);
          }
          const float pj = p_s[og][j];
#pragma unroll
          for (int i = 0; i < kOut; ++i) acc[i] = fmaf(pj, v[i], acc[i]);
        }
      }
      __syncthreads();  // the stage is read before the tile after next overwrites it
    }
    if constexpr (kSplitMode) {
      if (owns_output) {
        StoreSplitState(p, partial, t, static_cast<int64_t>(kvh) * group + og, od, split, range.splits, acc, kOut,
                        m_s[og], l_s[og], HD);
      }
    } else {
      float M = 0.0f, L = 0.0f;
      if (owns_output) {
        M = M_s[og];
        L = L_s[og];
        MergeInto(M, L, O, m_s[og], l_s[og], acc, kOut, split == 0);
      }
      __syncthreads();  // M_s, L_s, m_s and l_s are read before they change
      if (owns_output && od == 0) {
        M_s[og] = M;
        L_s[og] = L;
      }
      __syncthreads();
    }
  }
  if constexpr (!kSplitMode) {
    if (owns_output) {
      float* out = p.out + (t * p.num_heads + static_cast<int64_t>(kvh) * group + og) * HD + od;
#pragma unroll
      for (int i = 0; i < kOut; ++i) out[i] = __fdiv_rn(O[i], L_s[og]);
    }
  }
}

template <typename T, int HD, int G, bool kSplitMode>
void LaunchGroupedKernel(const PagedAttentionParams& p, int splits, float* scratch, cudaStream_t stream) {
  using S = GroupedShape<T, HD, G>;
  static uint32_t devices_done = 0;
  AllowSmem(GroupedAttentionKernel<T, HD, G, kSplitMode>, S::kSmem, &devices_done);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(kSplitMode ? splits : 1));
  GroupedAttentionKernel<T, HD, G, kSplitMode><<<grid, kGroupThreads, S::kSmem, stream>>>(p, scratch);
  PAGODA_CUDA_CHECK_LAUNCH("GroupedAttentionKernel");
  if (kSplitMode && splits > 1) {
    MergeSplitsKernel<HD><<<dim3(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads)), HD, 0,
                            stream>>>(p, scratch);
    PAGODA_CUDA_CHECK_LAUNCH("MergeSplitsKernel");
  }
}

template <typename T, int HD, int G>
void LaunchGroupedMode(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_tokens <= kSplitModeMaxTokens && p.num_tokens * p.num_kv_heads < kSplitModeMaxBlocks) {
    LaunchGroupedKernel<T, HD, G, true>(p, GroupedAttentionSplits(max_keys), scratch, stream);
  } else {
    LaunchGroupedKernel<T, HD, G, false>(p, 1, scratch, stream);
  }
}

template <typename T, int HD>
void LaunchGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  if (group == 1) {
    LaunchGroupedMode<T, HD, 1>(p, max_keys, scratch, stream);
  } else if (group == 2) {
    LaunchGroupedMode<T, HD, 2>(p, max_keys, scratch, stream);
  } else if (group <= 4) {
    LaunchGroupedMode<T, HD, 4>(p, max_keys, scratch, stream);
  } else {
    LaunchGroupedMode<T, HD, 8>(p, max_keys, scratch, stream);
  }
}

template <typename T>
bool TryGrouped(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_heads / p.num_kv_heads > kLargestGroup || p.num_tokens > 2147483647) return false;
  if ((p.block_size & (p.block_size - 1)) != 0) return false;
  if constexpr (KVRowTraits<T>::kQuantized) {
    // Rows copied in 4-byte pieces; runs of 8 values share an int8 scale.
    const int64_t hd = p.head_dim, g = p.k_format.group < hd ? p.k_format.group : hd;
    if (DeviceKVRowBytes(p.k_format) % 4 != 0 || DeviceKVRowBytes(p.v_format) != DeviceKVRowBytes(p.k_format)) {
      return false;
    }
    if (p.k_format.quant == KVQuant::kInt8 && (g % 8 != 0 || p.v_format.group != p.k_format.group)) return false;
  }
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
  // Only split mode (at most kSplitModeMaxTokens tokens) writes partial states.
  return std::min(num_tokens, kSplitModeMaxTokens) * num_heads * kMaxAttentionSplits * (head_dim + 2);
}

void PagedAttention(const PagedAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim <= kThreads * kMaxPerThread) << "CUDA PagedAttention: head_dim " << p.head_dim << " > 512";
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0) << "CUDA PagedAttention: head counts";
  PAGODA_CHECK(p.num_heads <= 65535) << "CUDA PagedAttention: too many heads";
  PAGODA_CHECK(p.k_format.quant == p.v_format.quant)
      << "CUDA PagedAttention: K in " << KVQuantName(p.k_format.quant) << ", V in " << KVQuantName(p.v_format.quant);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.head_dim + kThreads) * sizeof(float);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (TryGrouped<T>(p, max_keys, scratch, stream)) return;
    PagedAttentionKernel<T><<<grid, kThreads, smem, stream>>>(p);
    PAGODA_CUDA_CHECK_LAUNCH("PagedAttentionKernel");
  };
  switch (p.k_format.quant) {
    case KVQuant::kNone:
      switch (p.kv_dtype) {
        case DType::kF32: return run(float{});
        case DType::kBF16: return run(__nv_bfloat16{});
        case DType::kF16: return run(__half{});
        default: ThrowUnsupported("CUDA PagedAttention: KV element type " + std::string(DTypeName(p.kv_dtype)));
      }
    case KVQuant::kFp8E4M3: return run(Fp8E4M3Row{});
    case KVQuant::kFp8E5M2: return run(Fp8E5M2Row{});
    case KVQuant::kInt8: return run(Int8Row{});
    case KVQuant::kInt4:  // FlashAttention's shapes only (cuda_backend.cu checks the cache's)
    case KVQuant::kNvfp4:
      ThrowUnsupported(std::string("CUDA PagedAttention: ") + KVQuantName(p.k_format.quant) +
                       " KV runs on the tensor-core kernel only: head dim 64 or 128, at most 16 query heads per KV head, power-of-two blocks (use --kv-cache-dtype int8 or fp8)");
    default: ThrowUnsupported(std::string("CUDA PagedAttention: --kv-cache-dtype ") + KVQuantName(p.k_format.quant));
  }
}

}  // namespace pagoda::cuda
