#include "kernels/cuda/mla_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention.h"
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
// takes one token and kHeadTiles x 16 of its heads and walks the token's keys in tiles of kTile
// (the tile's rows copied once into shared memory, the latent's RANK values then ROPE, cp.async,
// the next tile landing while this one is used). A head tile's kColWarps warps share its work:
// each computes S = Q K^T over the RANK + ROPE values for its kTile / kColWarps keys of the tile,
// the tile's row maxima meet in shared memory, each writes its keys' P there (rounded to T, the
// cache's 16-bit type), and each computes O += P V over all the tile's keys for its RANK /
// kColWarps columns of the latent. mma.sync m16n8k16 with operands through ldmatrix, f32
// accumulators, the online softmax in f32 in the log2 domain (FlashAttention's tile arithmetic,
// flash_tile.cuh); a warp's l covers its keys and the warps' l are added in order.
// kSeg (up to 16 heads a token, whose few blocks need split-KV to fill the GPU): a token's keys
// are cut into FlashAttention's segments (FlashSegmentKeys, a function of the row alone); kSplit
// blocks take one segment each (blockIdx.z) and leave its state (O, m, l) to MlaMergeKernel,
// the others walk every segment and merge each as it ends, with the merge kernel's arithmetic
// (ScalesFor, Blend). Either way a row's result depends only on its token's keys: the same bits
// in any batch, split or not.
template <int RANK, int ROPE, int kTile>
struct MlaGeometry {
  static constexpr int kDk = RANK + ROPE;          // Q K^T's depth
  static constexpr int kRowBytes = kDk * 2 + 16;   // a Q or K row in shared memory, padded (banks)
  static constexpr int kKSteps = kDk / 16;
  static constexpr int kTileBytes = kTile * kRowBytes;
  static constexpr int kPRowBytes = kTile * 2 + 16;  // a row of P, padded
  static_assert(RANK % 16 == 0 && ROPE % 16 == 0 && kKSteps % 2 == 0, "pairs of 16-value k-steps");
};

template <int RANK_, int ROPE_, int kHeadTiles_, int kColWarps_, int kTile_>
struct MlaShape {
  static constexpr int RANK = RANK_, ROPE = ROPE_;
  static constexpr int kHeadTiles = kHeadTiles_, kColWarps = kColWarps_, kTile = kTile_;
  using Geo = MlaGeometry<RANK_, ROPE_, kTile_>;
  static constexpr int kWarps = kHeadTiles * kColWarps, kThreads = 32 * kWarps, kHeads = 16 * kHeadTiles;
  static constexpr int kCols = RANK / kColWarps;  // O's columns a warp
  static constexpr int kDTiles = kCols / 8;
  static constexpr int kKeys = kTile / kColWarps;  // S's keys a warp
  static constexpr int kNTiles = kKeys / 8;
  // S's partial sums a warp keeps (k-steps dealt round-robin): 8 chains of products in flight.
  static constexpr int kSParts = kNTiles >= 8 ? 1 : 8 / kNTiles;
  // Shared memory: Q's rows, two stages of K rows, P's rows of each head tile, a float per
  // (warp, row) for the row maxima and the final l.
  static constexpr int kKOffset = kHeads * Geo::kRowBytes;
  static constexpr int kPOffset = kKOffset + 2 * Geo::kTileBytes;
  static constexpr int kRedOffset = kPOffset + kHeadTiles * 16 * Geo::kPRowBytes;
  static constexpr int kSmem = kRedOffset + kWarps * 16 * 4;
  static_assert(kCols % 16 == 0 && kTile % 16 == 0 && (kNTiles == 1 || kNTiles % 2 == 0), "warp tiles");
};

template <typename T, class S, bool kSeg, bool kSplit>
__global__ void __launch_bounds__(S::kThreads) MlaMmaKernel(MlaAttentionParams p, float scale_log2, float* partial) {
  static_assert(kSeg || !kSplit, "split blocks take segments");
  using Geo = typename S::Geo;
  constexpr int kTile = S::kTile, RANK = S::RANK, ROPE = S::ROPE;
  extern __shared__ __align__(16) uint8_t mla_smem[];
  uint8_t* q_s = mla_smem;
  uint8_t* k_s = mla_smem + S::kKOffset;
  float* red = reinterpret_cast<float*>(mla_smem + S::kRedOffset);  // [warp][16 rows]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int head_tile = warp / S::kColWarps, cw = warp % S::kColWarps;
  const int col0 = cw * S::kCols, key0 = cw * S::kKeys;
  const int64_t t = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * S::kHeads;
  const int pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  // The block's keys [lo, hi]: the row, or (kSplit) segment blockIdx.z of it.
  int seg = pos + 1, lo = 0, num_segments = 1;
  if constexpr (kSeg) {
    seg = static_cast<int>(FlashSegmentKeys(0, pos));
    num_segments = pos / seg + 1;
    if constexpr (kSplit) {
      if (static_cast<int>(blockIdx.z) >= num_segments) return;
      lo = static_cast<int>(blockIdx.z) * seg;
    }
  }
  const int hi = kSplit ? min(pos, lo + seg - 1) : pos;

  // Q of the block's heads, rounded to T (rows past num_heads: zeros).
  for (int i = tid; i < S::kHeads * Geo::kDk / 2; i += S::kThreads) {
    const int r = i / (Geo::kDk / 2), c = 2 * (i % (Geo::kDk / 2));
    float2 v = make_float2(0.0f, 0.0f);
    if (h0 + r < p.num_heads) v = *reinterpret_cast<const float2*>(p.q + ((t * p.num_heads + h0 + r) * Geo::kDk + c));
    *reinterpret_cast<uint32_t*>(q_s + r * Geo::kRowBytes + 2 * c) = PackPair<T>(v.x, v.y);
  }
  // Tile j's rows: key j * kTile + r (zeros past pos), the latent's RANK values then ROPE.
  const uint8_t* latent = static_cast<const uint8_t*>(p.latent_cache);
  const uint8_t* rope_k = static_cast<const uint8_t*>(p.rope_cache);
  auto load_tile = [&](int stage, int j) {
    constexpr int kLatChunks = RANK * 2 / 16, kChunks = kLatChunks + ROPE * 2 / 16;
    uint8_t* dst = k_s + stage * Geo::kTileBytes;
    for (int i = tid; i < kTile * kChunks; i += S::kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int key = j * kTile + r;
      const bool ok = key <= pos;
      const int64_t slot =
          ok ? static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size : 0;
      const uint8_t* src = c < kLatChunks ? latent + (slot * RANK * 2 + c * 16)
                                          : rope_k + (slot * ROPE * 2 + (c - kLatChunks) * 16);
      CpAsync16(SmemAddr(dst + r * Geo::kRowBytes + c * 16), src, ok);
    }
  };

  float acc[S::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < S::kDTiles; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  // ldmatrix row addresses: Q's A fragments (row lane % 16, the k-step's half lane / 16), P's
  // likewise, and K's B fragments (one n-tile: four 8-value chunks, two k-steps, a load; more:
  // two n-tiles of one k-step a load).
  const uint32_t q_addr = SmemAddr(q_s + (head_tile * 16 + (lane & 15)) * Geo::kRowBytes + (lane >> 4) * 16);
  uint8_t* p_rows = mla_smem + S::kPOffset + head_tile * 16 * Geo::kPRowBytes;
  const uint32_t p_addr = SmemAddr(p_rows + (lane & 15) * Geo::kPRowBytes + (lane >> 4) * 16);
  const float* red_rows = red + head_tile * S::kColWarps * 16;
  const int k_row = S::kNTiles == 1 ? key0 + (lane & 7) : key0 + (lane & 7) + ((lane >> 4) << 3);
  const int k_chunk = S::kNTiles == 1 ? lane >> 3 : (lane >> 3) & 1;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8;
  // l of the warp's keys summed over its quad, then over the head tile's warps in order (every
  // warp's reads of the maxima end before a tile's P barrier, and the next writes follow the
  // next tile's first barrier).
  auto row_sums = [&](float (&ls)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lq = flash::QuadSum(l[h]);
      if (q == 0) red[warp * 16 + g + 8 * h] = lq;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ls[h] = red_rows[g + 8 * h];
#pragma unroll
      for (int c = 1; c < S::kColWarps; ++c) ls[h] = __fadd_rn(ls[h], red_rows[c * 16 + g + 8 * h]);
    }
  };
  // The walking kSeg blocks' merged result of the segments so far (O, M, L).
  float tot[kSeg && !kSplit ? S::kDTiles : 1][4];
  float tot_m[2] = {-INFINITY, -INFINITY}, tot_l[2] = {0.0f, 0.0f};
  const int tile_lo = lo / kTile, tile_hi = hi / kTile;
  load_tile(0, tile_lo);
  CpAsyncCommit();
  for (int j = tile_lo; j <= tile_hi; ++j) {
    CpAsyncWait<0>();
    __syncthreads();  // tile j is in; every warp is done with tile j - 1 (its stage, P, maxima)
    if (j < tile_hi) load_tile((j + 1 - tile_lo) & 1, j + 1);
    CpAsyncCommit();
    const uint8_t* ks = k_s + ((j - tile_lo) & 1) * Geo::kTileBytes;
    const uint32_t kb = SmemAddr(ks + k_row * Geo::kRowBytes + k_chunk * 16);
    // S = Q K^T for the warp's keys: k-step kk into partial sum kk % kParts (independent
    // chains of products in flight), the partial sums then added in order.
    constexpr int kParts = S::kSParts;
    float sp[kParts][S::kNTiles][4];
#pragma unroll
    for (int i = 0; i < kParts; ++i)
#pragma unroll
      for (int n = 0; n < S::kNTiles; ++n) sp[i][n][0] = sp[i][n][1] = sp[i][n][2] = sp[i][n][3] = 0.0f;
    if constexpr (S::kNTiles == 1) {
#pragma unroll
      for (int kk = 0; kk < Geo::kKSteps; kk += 2) {
        uint32_t a0[4], a1[4], b[4];
        LdMatrixX4(q_addr + kk * 32, a0[0], a0[1], a0[2], a0[3]);
        LdMatrixX4(q_addr + kk * 32 + 32, a1[0], a1[1], a1[2], a1[3]);
        LdMatrixX4(kb + kk * 32, b[0], b[1], b[2], b[3]);
        Mma<T>(sp[kk % kParts][0], a0, b);
        Mma<T>(sp[(kk + 1) % kParts][0], a1, b + 2);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < Geo::kKSteps; ++kk) {
        uint32_t a[4];
        LdMatrixX4(q_addr + kk * 32, a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int n = 0; n < S::kNTiles; n += 2) {
          uint32_t b[4];
          LdMatrixX4(kb + n * 8 * Geo::kRowBytes + kk * 32, b[0], b[1], b[2], b[3]);
          Mma<T>(sp[kk % kParts][n], a, b);
          Mma<T>(sp[kk % kParts][n + 1], a, b + 2);
        }
      }
    }
    float s[S::kNTiles][4];
#pragma unroll
    for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n][i] = sp[0][n][i];
#pragma unroll
        for (int part = 1; part < kParts; ++part) s[n][i] = __fadd_rn(s[n][i], sp[part][n][i]);
      }
    }
    // Scores in the log2 domain, keys past pos masked (the last tile); the tile's row maxima.
    const bool mask = (j + 1) * kTile - 1 > pos;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = __fmul_rn(s[n][i], scale_log2);
        if (mask && j * kTile + key0 + n * 8 + 2 * q + (i & 1) > pos) v = -INFINITY;
        s[n][i] = v;
        mx[i >> 1] = fmaxf(mx[i >> 1], v);
      }
    }
    mx[0] = flash::QuadMax(mx[0]);
    mx[1] = flash::QuadMax(mx[1]);
    if (q == 0) {
      red[warp * 16 + g] = mx[0];
      red[warp * 16 + g + 8] = mx[1];
    }
    __syncthreads();
    float corr[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = red_rows[g + 8 * h];
#pragma unroll
      for (int c = 1; c < S::kColWarps; ++c) tile_max = fmaxf(tile_max, red_rows[c * 16 + g + 8 * h]);
      const float m_new = fmaxf(m[h], tile_max);
      corr[h] = m[h] == m_new ? 1.0f : m[h] == -INFINITY ? 0.0f : Exp2(__fsub_rn(m[h], m_new));
      base[h] = m_new == -INFINITY ? 0.0f : m_new;
      m[h] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float e = Exp2(__fsub_rn(s[n][i], base[i >> 1]));
        s[n][i] = e;
        sum[i >> 1] = __fadd_rn(sum[i >> 1], e);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<uint32_t*>(p_rows + (g + 8 * h) * Geo::kPRowBytes + (key0 + n * 8 + 2 * q) * 2) =
            PackPair<T>(s[n][2 * h], s[n][2 * h + 1]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = __fadd_rn(__fmul_rn(l[h], corr[h]), sum[h]);
#pragma unroll
    for (int dt = 0; dt < S::kDTiles; ++dt) {
      acc[dt][0] = __fmul_rn(acc[dt][0], corr[0]);
      acc[dt][1] = __fmul_rn(acc[dt][1], corr[0]);
      acc[dt][2] = __fmul_rn(acc[dt][2], corr[1]);
      acc[dt][3] = __fmul_rn(acc[dt][3], corr[1]);
    }
    __syncthreads();  // the head tile's P is complete
    // O += P V: V is the latent (the rows' first RANK values), this warp's columns.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t a[4];
      LdMatrixX4(p_addr + kk * 32, a[0], a[1], a[2], a[3]);
      const uint32_t v_addr = SmemAddr(ks + (kk * 16 + v_row) * Geo::kRowBytes + col0 * 2 + (lane >> 4) * 16);
#pragma unroll
      for (int dp = 0; dp < S::kCols / 16; ++dp) {
        uint32_t b0[2], b1[2];
        LdMatrixX4Trans(v_addr + dp * 32, b0[0], b0[1], b1[0], b1[1]);
        Mma<T>(acc[2 * dp], a, b0);
        Mma<T>(acc[2 * dp + 1], a, b1);
      }
    }
    if constexpr (kSeg && !kSplit) {
      // A segment ends: merged into the result, the state starts over.
      if ((j + 1) * kTile % seg == 0 || j == tile_hi) {
        float ls[2];
        row_sums(ls);
        const bool first = j < seg / kTile;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const flash::MergeScales sc = first ? flash::MergeScales{0.0f, 1.0f, m[h]} : flash::ScalesFor(tot_m[h], m[h]);
#pragma unroll
          for (int dt = 0; dt < S::kDTiles; ++dt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& o = tot[dt][2 * h + e];
              o = first ? acc[dt][2 * h + e] : flash::Blend(o, acc[dt][2 * h + e], sc);
              acc[dt][2 * h + e] = 0.0f;
            }
          }
          tot_l[h] = first ? ls[h] : flash::Blend(tot_l[h], ls[h], sc);
          tot_m[h] = sc.m;
          m[h] = -INFINITY;
          l[h] = 0.0f;
        }
      }
    }
  }
  // out = O / l (as O x 1/l, as the merge kernel), or (kSplit, a row of several segments) this
  // segment's state to `partial`.
  float ls[2];
  if constexpr (kSeg && !kSplit) {
    ls[0] = tot_l[0], ls[1] = tot_l[1];
  } else {
    row_sums(ls);
  }
  const int64_t depth = gridDim.z;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t head = h0 + head_tile * 16 + g + 8 * h;
    if (head >= p.num_heads) continue;
    if (kSplit && num_segments > 1) {
      const int64_t at = (t * p.num_heads + head) * depth + blockIdx.z;
      float* row = partial + at * RANK + col0;
#pragma unroll
      for (int dt = 0; dt < S::kDTiles; ++dt) {
        *reinterpret_cast<float2*>(row + dt * 8 + 2 * q) = make_float2(acc[dt][2 * h], acc[dt][2 * h + 1]);
      }
      if (cw == 0 && q == 0) {
        *reinterpret_cast<float2*>(partial + p.num_tokens * p.num_heads * depth * RANK + at * 2) =
            make_float2(m[h], ls[h]);
      }
      continue;
    }
    const float inv = ls[h] > 0.0f ? __frcp_rn(ls[h]) : 0.0f;
    float* row = p.out + (t * p.num_heads + head) * RANK + col0;
#pragma unroll
    for (int dt = 0; dt < S::kDTiles; ++dt) {
      const float o0 = kSeg && !kSplit ? tot[dt][2 * h] : acc[dt][2 * h];
      const float o1 = kSeg && !kSplit ? tot[dt][2 * h + 1] : acc[dt][2 * h + 1];
      *reinterpret_cast<float2*>(row + dt * 8 + 2 * q) = make_float2(__fmul_rn(o0, inv), __fmul_rn(o1, inv));
    }
  }
}

// The split blocks' merge: a token's segment states in order, as the walking blocks merge them.
template <int RANK>
__global__ void MlaMergeKernel(MlaAttentionParams p, const float* partial, int64_t depth) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int pos = p.positions[t];
  const int seg = static_cast<int>(FlashSegmentKeys(0, pos));
  const int num_segments = pos / seg + 1;
  if (num_segments == 1) return;
  const int64_t at = (t * p.num_heads + h) * depth;
  const float* ml = partial + p.num_tokens * p.num_heads * depth * RANK + at * 2;
  for (int d = threadIdx.x; d < RANK; d += blockDim.x) {
    float M = ml[0], L = ml[1], O = partial[at * RANK + d];
    for (int s = 1; s < num_segments; ++s) {
      const flash::MergeScales sc = flash::ScalesFor(M, ml[2 * s]);
      O = flash::Blend(O, partial[(at + s) * RANK + d], sc);
      L = flash::Blend(L, ml[2 * s + 1], sc);
      M = sc.m;
    }
    const float inv = L > 0.0f ? __frcp_rn(L) : 0.0f;
    p.out[(t * p.num_heads + h) * RANK + d] = __fmul_rn(O, inv);
  }
}

// The kernel for a shape; kSplit: `depth` blocks a (token, heads) and the merge after them.
template <typename T, int RANK, int ROPE, int kHeadTiles, int kColWarps, int kTile, bool kSeg = false,
          bool kSplit = false>
void LaunchMlaMma(const MlaAttentionParams& p, int depth, float* partial, cudaStream_t stream) {
  using S = MlaShape<RANK, ROPE, kHeadTiles, kColWarps, kTile>;
  auto kernel = MlaMmaKernel<T, S, kSeg, kSplit>;
  static uint32_t devices_done = 0;
  AllowSmem(kernel, S::kSmem, &devices_done);
  const unsigned head_blocks = static_cast<unsigned>((p.num_heads + S::kHeads - 1) / S::kHeads);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), head_blocks, kSplit ? static_cast<unsigned>(depth) : 1u);
  const float scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);
  kernel<<<grid, S::kThreads, S::kSmem, stream>>>(p, scale_log2, partial);
  PAGODA_CUDA_CHECK_LAUNCH("MlaMmaKernel");
  if constexpr (kSplit) {
    const dim3 merge_grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
    MlaMergeKernel<RANK><<<merge_grid, 128, 0, stream>>>(p, partial, depth);
    PAGODA_CUDA_CHECK_LAUNCH("MlaMergeKernel");
  }
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

// Up to 16 heads (a tensor-parallel rank's share): one head tile a block, 64-key tiles over eight
// warps (8 keys of S, 64 of O's columns each), cut into segments, split across blocks for steps
// of up to kMlaSplitMaxTokens tokens; more heads: 64 a block, 32-key tiles, each head tile's two
// warps 16 keys and 256 columns (the latent read once for 64 heads), no segments. The shape
// depends on the model's heads alone, so every step of a model computes a row the same way.
constexpr int64_t kMlaSplitMaxTokens = 64;

bool MlaSegments(const MlaAttentionParams& p) { return p.num_heads <= 16; }

template <typename T, int RANK, int kColWarpsOneTile>
void RunMlaMma(const MlaAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (!MlaSegments(p)) {
    LaunchMlaMma<T, RANK, 64, 4, RANK == 512 ? 2 : 1, 32>(p, 1, nullptr, stream);
  } else if (scratch != nullptr && p.num_tokens <= kMlaSplitMaxTokens) {
    LaunchMlaMma<T, RANK, 64, 1, kColWarpsOneTile, 64, true, true>(p, FlashSplitDepth(max_keys), scratch, stream);
  } else {
    LaunchMlaMma<T, RANK, 64, 1, kColWarpsOneTile, 64, true, false>(p, 1, nullptr, stream);
  }
}

}  // namespace

int64_t MlaAttentionScratchFloats(const MlaAttentionParams& p, int64_t max_keys) {
  if (!MlaMmaServes(p) || !MlaSegments(p) || p.num_tokens > kMlaSplitMaxTokens) return 0;
  return p.num_tokens * p.num_heads * FlashSplitDepth(max_keys) * (p.kv_lora_rank + 2);
}

void MlaAttention(const MlaAttentionParams& p, int64_t max_keys, float* scratch, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  if (MlaMmaServes(p)) {
    const bool bf16 = p.kv_dtype == DType::kBF16;
    if (p.kv_lora_rank == 512) {
      bf16 ? RunMlaMma<__nv_bfloat16, 512, 8>(p, max_keys, scratch, stream)
           : RunMlaMma<__half, 512, 8>(p, max_keys, scratch, stream);
    } else {
      bf16 ? RunMlaMma<__nv_bfloat16, 64, 4>(p, max_keys, scratch, stream)
           : RunMlaMma<__half, 64, 4>(p, max_keys, scratch, stream);
    }
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
