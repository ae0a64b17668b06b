#include "kernels/cuda/mla_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/smem_limit.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 8;  // kv_lora_rank <= 1024

template <typename T>
__global__ void MlaAttentionKernel(MlaAttentionParams p) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int rank = static_cast<int>(p.kv_lora_rank), rope = static_cast<int>(p.rope_dim);
  extern __shared__ float smem[];
  float* q = smem;                      // [rank + rope]
  float* scores = smem + rank + rope;   // [kThreads]
  const float* q_row = p.q + (t * p.num_heads + h) * (rank + rope);
  for (int d = threadIdx.x; d < rank + rope; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  const T* latent = static_cast<const T*>(p.latent_cache);
  const T* rope_k = static_cast<const T*>(p.rope_cache);
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  __shared__ int64_t slots[kThreads];
  for (int64_t k0 = 0; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t kp = k0 + threadIdx.x;
      const int64_t slot = static_cast<int64_t>(table[kp / p.block_size]) * p.block_size + kp % p.block_size;
      slots[threadIdx.x] = slot;
      const T* c = latent + slot * rank;
      const T* pe = rope_k + slot * rope;
      float dot = 0.0f;
      for (int d = 0; d < rank; ++d) dot += q[d] * ToFloat(c[d]);
      float dot_pe = 0.0f;
      for (int d = 0; d < rope; ++d) dot_pe += q[rank + d] * ToFloat(pe[d]);
      scores[threadIdx.x] = p.scale * (dot + dot_pe);
    }
    __syncthreads();
    state.AddTile(scores, n, rank, [&](int j, int d) { return ToFloat(latent[slots[j] * rank + d]); });
  }
  state.Store(p.out + (t * p.num_heads + h) * rank, rank);
}

// ---- tensor cores: a block per (token, up to 64 heads), the latent read once for all of them ----
//
// MLA is MQA over the latent: every head of a token reads the same (latent, k_pe) rows. A block
// takes one token and kHeadTiles x 16 of its heads, walks the token's keys in tiles of kMlaTile
// (the tile's rows copied once into shared memory: the latent's RANK values then ROPE, cp.async),
// and its warps run S = Q K^T over the RANK + ROPE values and O += P V over the latent on
// mma.sync m16n8k16, Q and P rounded to T (the cache's 16-bit type), f32 accumulators, the online
// softmax in f32 in the log2 domain (FlashAttention's tile arithmetic, flash_tile.cuh). A warp
// holds 16 heads and kCols of O's columns; the kColWarps warps of a head tile, and the blocks
// of a (token, heads) along blockIdx.z, each compute the tile's scores (the same bits) and their
// own columns (a column's sum does not depend on which warp runs it: more blocks for few heads).
// A row's result depends only on its token's keys: the same bits in any batch.
constexpr int kMlaTile = 32;  // keys a tile

template <int RANK, int ROPE>
struct MlaGeometry {
  static constexpr int kDk = RANK + ROPE;         // Q K^T's depth
  static constexpr int kRowBytes = kDk * 2 + 16;  // a Q or K row in shared memory, padded (banks)
  static constexpr int kKSteps = kDk / 16;
  static constexpr int kTileBytes = kMlaTile * kRowBytes;
  static_assert(RANK % 16 == 0 && ROPE % 16 == 0, "16-value k-steps");
};

template <typename T, int RANK, int ROPE, int kHeadTiles, int kColWarps, int kCols>
__global__ void __launch_bounds__(32 * kHeadTiles * kColWarps) MlaMmaKernel(MlaAttentionParams p, float scale_log2) {
  using Geo = MlaGeometry<RANK, ROPE>;
  constexpr int kThreads = 32 * kHeadTiles * kColWarps, kHeads = 16 * kHeadTiles;
  constexpr int kDTiles = kCols / 8;
  static_assert(kCols % 16 == 0, "O's columns in pairs of n-tiles");
  extern __shared__ __align__(16) uint8_t mla_smem[];
  uint8_t* q_s = mla_smem;                            // [kHeads] rows
  uint8_t* k_s = mla_smem + kHeads * Geo::kRowBytes;  // two stages of kMlaTile rows
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int head_tile = warp / kColWarps;
  const int col0 = static_cast<int>(blockIdx.z) * kColWarps * kCols + (warp % kColWarps) * kCols;
  const int64_t t = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const int pos = p.positions[t];
  const int32_t* table = p.block_tables[t];

  // Q of the block's heads, rounded to T (rows past num_heads: zeros).
  for (int i = tid; i < kHeads * Geo::kDk / 2; i += kThreads) {
    const int r = i / (Geo::kDk / 2), c = 2 * (i % (Geo::kDk / 2));
    float2 v = make_float2(0.0f, 0.0f);
    if (h0 + r < p.num_heads) v = *reinterpret_cast<const float2*>(p.q + ((t * p.num_heads + h0 + r) * Geo::kDk + c));
    *reinterpret_cast<uint32_t*>(q_s + r * Geo::kRowBytes + 2 * c) = PackPair<T>(v.x, v.y);
  }
  // Tile j's rows: key j * kMlaTile + r (zeros past pos), the latent's RANK values then ROPE.
  const uint8_t* latent = static_cast<const uint8_t*>(p.latent_cache);
  const uint8_t* rope_k = static_cast<const uint8_t*>(p.rope_cache);
  auto load_tile = [&](int stage, int j) {
    constexpr int kLatChunks = RANK * 2 / 16, kChunks = kLatChunks + ROPE * 2 / 16;
    uint8_t* dst = k_s + stage * Geo::kTileBytes;
    for (int i = tid; i < kMlaTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int key = j * kMlaTile + r;
      const bool ok = key <= pos;
      const int64_t slot =
          ok ? static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size : 0;
      const uint8_t* src = c < kLatChunks ? latent + (slot * RANK * 2 + c * 16)
                                          : rope_k + (slot * ROPE * 2 + (c - kLatChunks) * 16);
      CpAsync16(SmemAddr(dst + r * Geo::kRowBytes + c * 16), src, ok);
    }
  };

  float acc[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const uint8_t* q_rows = q_s + head_tile * 16 * Geo::kRowBytes;
  const int tiles = pos / kMlaTile + 1;
  load_tile(0, 0);
  CpAsyncCommit();
  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) load_tile((j + 1) & 1, j + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint8_t* ks = k_s + (j & 1) * Geo::kTileBytes;
    // S = Q K^T: four n-tiles of 8 keys.
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll 4
    for (int kk = 0; kk < Geo::kKSteps; ++kk) {
      uint32_t a[4];
      const uint8_t* qa = q_rows + g * Geo::kRowBytes + kk * 32 + q * 4;
      a[0] = *reinterpret_cast<const uint32_t*>(qa);
      a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * Geo::kRowBytes);
      a[2] = *reinterpret_cast<const uint32_t*>(qa + 16);
      a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * Geo::kRowBytes + 16);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const uint8_t* kb = ks + (n * 8 + g) * Geo::kRowBytes + kk * 32 + q * 4;
        const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(kb), *reinterpret_cast<const uint32_t*>(kb + 16)};
        Mma<T>(s[n], a, b);
      }
    }
    // Scores in the log2 domain, keys past pos masked (the last tile); the online softmax.
    const bool mask = (j + 1) * kMlaTile - 1 > pos;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = __fmul_rn(s[n][i], scale_log2);
        if (mask && j * kMlaTile + n * 8 + 2 * q + (i & 1) > pos) v = -INFINITY;
        s[n][i] = v;
        mx[i >> 1] = fmaxf(mx[i >> 1], v);
      }
    }
    float corr[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], flash::QuadMax(mx[h]));
      corr[h] = m[h] == m_new ? 1.0f : m[h] == -INFINITY ? 0.0f : Exp2(__fsub_rn(m[h], m_new));
      base[h] = m_new == -INFINITY ? 0.0f : m_new;
      m[h] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float e = Exp2(__fsub_rn(s[n][i], base[i >> 1]));
        s[n][i] = e;
        sum[i >> 1] = __fadd_rn(sum[i >> 1], e);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = __fadd_rn(__fmul_rn(l[h], corr[h]), sum[h]);
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      acc[dt][0] = __fmul_rn(acc[dt][0], corr[0]);
      acc[dt][1] = __fmul_rn(acc[dt][1], corr[0]);
      acc[dt][2] = __fmul_rn(acc[dt][2], corr[1]);
      acc[dt][3] = __fmul_rn(acc[dt][3], corr[1]);
    }
    // O += P V: V is the latent (the rows' first RANK values), this warp's kCols columns.
#pragma unroll
    for (int kk = 0; kk < kMlaTile / 16; ++kk) {
      const uint32_t a[4] = {PackPair<T>(s[2 * kk][0], s[2 * kk][1]), PackPair<T>(s[2 * kk][2], s[2 * kk][3]),
                             PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int key_row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint32_t base_addr = SmemAddr(ks + key_row * Geo::kRowBytes + col0 * 2 + (lane >> 4) * 16);
#pragma unroll
      for (int dp = 0; dp < kCols / 16; ++dp) {
        uint32_t b0[2], b1[2];
        LdMatrixX4Trans(base_addr + dp * 32, b0[0], b0[1], b1[0], b1[1]);
        Mma<T>(acc[2 * dp], a, b0);
        Mma<T>(acc[2 * dp + 1], a, b1);
      }
    }
    __syncthreads();  // the stage is read before the tile after next overwrites it
  }
  // out = O / l for the warp's heads.
  const float l_total[2] = {flash::QuadSum(l[0]), flash::QuadSum(l[1])};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t head = h0 + head_tile * 16 + g + 8 * h;
    if (head >= p.num_heads) continue;
    const float inv = l_total[h] > 0.0f ? __frcp_rn(l_total[h]) : 0.0f;
    float* row = p.out + (t * p.num_heads + head) * RANK + col0;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      *reinterpret_cast<float2*>(row + dt * 8 + 2 * q) =
          make_float2(__fmul_rn(acc[dt][2 * h], inv), __fmul_rn(acc[dt][2 * h + 1], inv));
    }
  }
}

// kColWarps warps of kCols columns for each head tile; RANK / (kColWarps x kCols) blocks along z.
template <typename T, int RANK, int ROPE, int kHeadTiles, int kColWarps, int kCols>
void LaunchMlaMma(const MlaAttentionParams& p, cudaStream_t stream) {
  static_assert(RANK % (kColWarps * kCols) == 0, "whole column blocks");
  using Geo = MlaGeometry<RANK, ROPE>;
  constexpr int kSmem = 16 * kHeadTiles * Geo::kRowBytes + 2 * Geo::kTileBytes;
  auto kernel = MlaMmaKernel<T, RANK, ROPE, kHeadTiles, kColWarps, kCols>;
  static uint32_t devices_done = 0;
  AllowSmem(kernel, kSmem, &devices_done);
  const int64_t heads = 16 * kHeadTiles;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>((p.num_heads + heads - 1) / heads),
                  RANK / (kColWarps * kCols));
  const float scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);
  kernel<<<grid, 32 * kHeadTiles * kColWarps, kSmem, stream>>>(p, scale_log2);
  PAGODA_CUDA_CHECK_LAUNCH("MlaMmaKernel");
}

// The tensor-core kernel's shapes: 16-bit caches, DeepSeek's latent (rank 512, RoPE 64; rank 64
// for the tests' small models), 16-byte aligned rows. The choice depends on the cache alone, so
// every step of a model takes the same kernel (the same bits).
bool MlaMmaServes(const MlaAttentionParams& p) {
  if (p.kv_dtype != DType::kBF16 && p.kv_dtype != DType::kF16) return false;
  if (p.rope_dim != 64 || (p.kv_lora_rank != 512 && p.kv_lora_rank != 64)) return false;
  if (p.latent_format.quant != KVQuant::kNone || p.rope_format.quant != KVQuant::kNone) return false;
  const auto aligned = [](const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15) == 0; };
  return aligned(p.latent_cache) && aligned(p.rope_cache) && p.num_heads <= 65535 * 64 && p.num_tokens <= 2147483647;
}

template <typename T>
void RunMlaMma(const MlaAttentionParams& p, cudaStream_t stream) {
  // Up to 16 heads (a tensor-parallel rank's share): one head tile a block, O's 512 columns over
  // four blocks of two warps (four times the blocks for a batch); more heads: 64 a block, each
  // warp 256 columns (the latent read once for 64 heads).
  const bool one_tile = p.num_heads <= 16;
  if (p.kv_lora_rank == 512) {
    one_tile ? LaunchMlaMma<T, 512, 64, 1, 2, 64>(p, stream) : LaunchMlaMma<T, 512, 64, 4, 2, 256>(p, stream);
  } else {
    one_tile ? LaunchMlaMma<T, 64, 64, 1, 1, 64>(p, stream) : LaunchMlaMma<T, 64, 64, 4, 1, 64>(p, stream);
  }
}

}  // namespace

void MlaAttention(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  if (MlaMmaServes(p)) {
    p.kv_dtype == DType::kBF16 ? RunMlaMma<__nv_bfloat16>(p, stream) : RunMlaMma<__half>(p, stream);
    return;
  }
  PAGODA_CHECK(p.kv_lora_rank <= kThreads * kMaxPerThread) << "CUDA MlaAttention: kv_lora_rank " << p.kv_lora_rank;
  PAGODA_CHECK(p.num_heads <= 65535) << "CUDA MlaAttention: too many heads";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.kv_lora_rank + p.rope_dim + kThreads) * sizeof(float);
  switch (p.kv_dtype) {
    case DType::kF32: MlaAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kBF16: MlaAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kF16: MlaAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p); break;
    default: ThrowUnsupported("CUDA MlaAttention: KV element type " + std::string(DTypeName(p.kv_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("MlaAttentionKernel");
}

}  // namespace pagoda::cuda
