// FlashAttention's tile of 64 keys on tensor cores (mma.sync m16n8k16), shared by its launch
// shapes (flash_kernel.cuh): the shared-memory geometry, a thread's rows and online-softmax
// state, the segment merge's roundings, and the two products of a tile: S = Q K^T with the
// softmax (K's fragments from a 16-bit tile or from a source such as RawFp8K) and O += P V.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace pagoda::cuda::flash {

inline constexpr int kKeyTile = 64;  // keys per tile, at absolute positions [64j, 64j + 64)

template <int HD>
struct Geometry {
  // A K or V row in shared memory, padded by 16 bytes: the rows an ldmatrix (or a quad's
  // 32-bit reads) touches fall in different banks.
  static constexpr int kRowBytes = HD * 2 + 16;
  static constexpr int kTileBytes = kKeyTile * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;      // K and V
  static constexpr int kPipelineBytes = 2 * kStageBytes;  // two stages
  static constexpr int kDTiles = HD / 8;                  // n-tiles of O
  static constexpr int kKSteps = HD / 16;                 // k-steps of Q K^T
  static constexpr int kOutFloats = HD / 2;               // O values a thread holds (two rows)
};

// A thread's two rows (g and g + 8 of its warp's 16): first and last key, keys per segment.
struct Rows {
  int first[2];
  int pos[2];  // -1: a padding row
  int seg[2];
  bool valid[2];
};

// The online-softmax state of a thread's two rows for the current segment: O's accumulators in
// the C layout (acc[dt][2h + j]: row h, column dt * 8 + 2q + j), the running max (log2 domain,
// the same on the quad's four threads) and this thread's part of the running sum.
template <int HD>
struct State {
  float acc[HD / 8][4];
  float m[2];
  float l[2];
  __device__ void Reset(int h) {
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) acc[dt][2 * h] = acc[dt][2 * h + 1] = 0.0f;
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
};

// The head-dim column of O's accumulator acc[dt][2h + j] for the thread of quad lane q: dt * 8
// + 2q + j, or with kPermuted (V's fragments built in registers from 4-byte reads: n-tile 4c + i's
// column n is head-dim column 32c + 4n + i) 32 (dt / 4) + 4 (2q + j) + dt % 4.
template <bool kPermuted>
__device__ __forceinline__ int OutColumn(int dt, int q, int j) {
  return kPermuted ? 32 * (dt >> 2) + 4 * (2 * q + j) + (dt & 3) : dt * 8 + 2 * q + j;
}

// An accumulator pair acc[dt][2h], acc[dt][2h + 1] of a row into `row` (head-dim columns).
template <bool kPermuted>
__device__ __forceinline__ void StorePair(float* row, int dt, int q, float v0, float v1) {
  if constexpr (kPermuted) {
    row[OutColumn<true>(dt, q, 0)] = v0;
    row[OutColumn<true>(dt, q, 1)] = v1;
  } else {
    *reinterpret_cast<float2*>(row + OutColumn<false>(dt, q, 0)) = make_float2(v0, v1);
  }
}

// The same pair rounded to bf16 into `row` (a bf16 copy of the output), or nothing when null.
template <bool kPermuted>
__device__ __forceinline__ void StorePairBf16(__nv_bfloat16* row, int dt, int q, float v0, float v1) {
  if (row == nullptr) return;
  if constexpr (kPermuted) {
    row[OutColumn<true>(dt, q, 0)] = __float2bfloat16_rn(v0);
    row[OutColumn<true>(dt, q, 1)] = __float2bfloat16_rn(v1);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(row + OutColumn<false>(dt, q, 0)) = __floats2bfloat162_rn(v0, v1);
  }
}

__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
// The same bits on the quad's four threads (each addition is commutative).
__device__ __forceinline__ float QuadSum(float x) {
  x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Merging a segment (m, l, o) into the result so far (M, L, O): the factors for both sides, then
// X <- X a + x b for O's values and L, with explicit roundings. The split shape's merge kernel
// and the walking shapes run these same functions.
struct MergeScales {
  float a, b, m;
};
__device__ __forceinline__ MergeScales ScalesFor(float M, float m) {
  const float m_new = fmaxf(M, m);
  return {Exp2(__fsub_rn(M, m_new)), Exp2(__fsub_rn(m, m_new)), m_new};
}
__device__ __forceinline__ float Blend(float X, float x, MergeScales s) {
  return __fadd_rn(__fmul_rn(X, s.a), __fmul_rn(x, s.b));
}
// A row's output O / L as O times L's reciprocal (rounded once), as FlashAttention normalizes:
// one reciprocal a row and a multiply a value instead of an IEEE division a value (~8
// instructions each: a prefill block's 64 a thread at head dim 128 are about one tile of its
// loop). Within 1.5 ulp of the quotient; every shape normalizes this way, so they agree.
__device__ __forceinline__ float Reciprocal(float l) { return __frcp_rn(l); }
__device__ __forceinline__ float Normalize(float o, float inv_l) { return __fmul_rn(o, inv_l); }
// A row's log-sum-exp of its scaled scores in the log2 domain, from its (max, sum) state.
__device__ __forceinline__ float RowLse(float m, float l) { return m + log2f(l); }

// K's B fragments from 16-bit rows in shared memory (kRowBytes apart).
template <int HD>
struct TileK {
  const uint8_t* ks;
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint8_t* row = ks + (n * 8 + g) * Geometry<HD>::kRowBytes + kk * 32 + q * 4;
    b[0] = *reinterpret_cast<const uint32_t*>(row);
    b[1] = *reinterpret_cast<const uint32_t*>(row + 16);
  }
  // The fragments of n-tiles n and n + 1 by one ldmatrix.x4: lanes 8i..8i+7 address key rows
  // 8n + 8 (i / 2) + (lane % 8) at columns 16 kk + 8 (i % 2), the same values as Load's.
  __device__ __forceinline__ void LoadPair(int n, int kk, uint32_t (&b0)[2], uint32_t (&b1)[2]) const {
    const int lane = threadIdx.x & 31, i = lane >> 3;
    const uint8_t* row = ks + (n * 8 + (i >> 1) * 8 + (lane & 7)) * Geometry<HD>::kRowBytes + kk * 32 + (i & 1) * 16;
    LdMatrixX4(SmemAddr(row), b0[0], b0[1], b1[0], b1[1]);
  }
  __device__ __forceinline__ float Scale(float x, int, int) const { return x; }
  static constexpr bool kPairs = true;
};

// kRows8 (here and in the functions below): the warp's rows 8-15 are padding (a decode warp of
// at most 8 query rows), so their accumulators, scores and softmax state are not computed
// (MmaRows); rows 0-7 get the same bits either way.
// S = Q K^T of a tile of 64 keys for the warp's 16 rows (K's fragments from `kf`): eight n-tiles
// of 8 keys in the C layout.
template <typename T, int HD, bool kRows8 = false, class KFrag>
__device__ __forceinline__ void TileScores(const KFrag& kf, const uint32_t (&qf)[HD / 16][4], float (&s)[8][4]) {
  using Geo = Geometry<HD>;
#pragma unroll
  for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < Geo::kKSteps; ++kk) {
    if constexpr (requires { requires KFrag::kPairs; }) {
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        uint32_t b0[2], b1[2];
        kf.LoadPair(n, kk, b0, b1);
        MmaRows<T, kRows8>(s[n], qf[kk], b0);
        MmaRows<T, kRows8>(s[n + 1], qf[kk], b1);
      }
    } else {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        uint32_t b[2];
        kf.Load(n, kk, b);
        MmaRows<T, kRows8>(s[n], qf[kk], b);
      }
    }
  }
}

// O's accumulators times each row's correction.
template <int HD, bool kRows8 = false>
__device__ __forceinline__ void RescaleO(State<HD>& st, const float (&corr)[2]) {
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    st.acc[dt][0] = __fmul_rn(st.acc[dt][0], corr[0]);
    st.acc[dt][1] = __fmul_rn(st.acc[dt][1], corr[0]);
    if constexpr (!kRows8) {
      st.acc[dt][2] = __fmul_rn(st.acc[dt][2], corr[1]);
      st.acc[dt][3] = __fmul_rn(st.acc[dt][3], corr[1]);
    }
  }
}

// The key (in its 64-key tile) of the scores' n-tile n, column c: n x 8 + c; or, for K fragment
// sources with kSpread (fp8 rows of 33 words), 8 (c / 2) + c % 2 + 2 (n % 4) + 32 (n / 4), so
// the keys a k-step's B fragments read (V: keys 2q, 2q + 1, 2q + 8, 2q + 9 of the quad's thread
// q; K: key c of thread group c) sit 8 rows apart, a quad's reads in four bank octets instead
// of four threads on one bank. The same products in another order.
template <bool kSpread>
__device__ __forceinline__ int TileKey(int n, int c) {
  if constexpr (kSpread) return 8 * (c >> 1) + (c & 1) + 2 * (n & 3) + 32 * (n >> 2);
  return n * 8 + c;
}
template <class KFrag>
inline constexpr bool kSpreadKeys = requires { requires KFrag::kSpread; };

// The online softmax of a tile's scores `s` (TileScores' layout; the keys from absolute key
// `tile_start`): s = P = 2^(S - m), the state's max and sum updated and (kRescaleO) O rescaled;
// `corr` gets each row's correction. `mask`: some row of the warp has keys of this tile outside
// its window. `kf` scales a quantized K's rows.
template <int HD, bool kRows8 = false, bool kRescaleO = true, class KFrag>
__device__ __forceinline__ void TileSoftmax(const KFrag& kf, int tile_start, const Rows& rows, float scale_log2,
                                            bool mask, State<HD>& st, float (&s)[8][4], float (&corr)[2]) {
  const int lane = threadIdx.x & 31, q = lane & 3;
  constexpr int kI = kRows8 ? 2 : 4, kH = kRows8 ? 1 : 2;  // kRows8: rows 8-15 (h = 1) are padding
  // Scores (a quantized K's row scales first), masked; the rows' new maxima in the log2 domain:
  // scale_log2 > 0 and rounding is monotonic, so the scaled maximum is the maximum's product.
  // The masked and unmasked scans are separate branches (mask is the same on every lane), so
  // a tile inside every row's window runs no key comparisons at all.
  float mx[2] = {-INFINITY, -INFINITY};
  auto scan = [&]<bool kMask>() {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int i = 0; i < kI; ++i) {
        const int h = i >> 1;
        float v = kf.Scale(s[n][i], n, i & 1);
        if constexpr (kMask) {
          const int key = tile_start + TileKey<kSpreadKeys<KFrag>>(n, 2 * q + (i & 1));
          if (key < rows.first[h] || key > rows.pos[h]) v = -INFINITY;
        }
        s[n][i] = v;
        mx[h] = fmaxf(mx[h], v);
      }
    }
  };
  if (mask) {
    scan.template operator()<true>();
  } else {
    scan.template operator()<false>();
  }
  float base[2];
  corr[0] = corr[1] = 1.0f;
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const float m_old = st.m[h];
    const float m_new = fmaxf(m_old, __fmul_rn(QuadMax(mx[h]), scale_log2));
    corr[h] = m_old == m_new ? 1.0f : m_old == -INFINITY ? 0.0f : Exp2(__fsub_rn(m_old, m_new));
    base[h] = m_new == -INFINITY ? 0.0f : m_new;
    st.m[h] = m_new;
  }
  // P = 2^(S scale_log2 - m), one fused multiply-add a score; this thread's part of the row
  // sums, in a fixed order.
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int i = 0; i < kI; ++i) {
      const int h = i >> 1;
      const float p = Exp2(__fmaf_rn(s[n][i], scale_log2, -base[h]));
      s[n][i] = p;
      sum[h] = __fadd_rn(sum[h], p);
    }
  }
#pragma unroll
  for (int h = 0; h < kH; ++h) st.l[h] = __fadd_rn(__fmul_rn(st.l[h], corr[h]), sum[h]);
  if constexpr (kRescaleO) RescaleO<HD, kRows8>(st, corr);
}

// The first half of a tile: its scores and their softmax.
template <typename T, int HD, bool kRows8 = false, class KFrag>
__device__ __forceinline__ void ScoreTileFrom(const KFrag& kf, int tile_start, const uint32_t (&qf)[HD / 16][4],
                                              const Rows& rows, float scale_log2, bool mask, State<HD>& st,
                                              float (&s)[8][4]) {
  TileScores<T, HD, kRows8>(kf, qf, s);
  float corr[2];
  TileSoftmax<HD, kRows8>(kf, tile_start, rows, scale_log2, mask, st, s, corr);
}

// The same from K rows of a 16-bit tile.
template <typename T, int HD, bool kRows8 = false>
__device__ __forceinline__ void ScoreTile(const uint8_t* ks, int tile_start, const uint32_t (&qf)[HD / 16][4],
                                          const Rows& rows, float scale_log2, bool mask, State<HD>& st,
                                          float (&s)[8][4]) {
  ScoreTileFrom<T, HD, kRows8>(TileK<HD>{ks}, tile_start, qf, rows, scale_log2, mask, st, s);
}

// The second half: O += P V (V rows in shared memory). P's C fragments are the A fragments of
// the second product (16 keys a k-step).
template <typename T, int HD, bool kRows8 = false>
__device__ __forceinline__ void AddValues(const uint8_t* vs, const float (&s)[8][4], State<HD>& st) {
  using Geo = Geometry<HD>;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < kKeyTile / 16; ++kk) {
    const uint32_t a[4] = {PackPair<T>(s[2 * kk][0], s[2 * kk][1]),
                           kRows8 ? 0u : PackPair<T>(s[2 * kk][2], s[2 * kk][3]),
                           PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                           kRows8 ? 0u : PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    const int key_row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    const uint32_t base_addr = SmemAddr(vs + key_row * Geo::kRowBytes + (lane >> 4) * 16);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b0[2], b1[2];
      LdMatrixX4Trans(base_addr + dp * 32, b0[0], b0[1], b1[0], b1[1]);
      MmaRows<T, kRows8>(st.acc[2 * dp], a, b0);
      MmaRows<T, kRows8>(st.acc[2 * dp + 1], a, b1);
    }
  }
}

// One tile of 64 keys, both halves.
template <typename T, int HD, bool kRows8 = false>
__device__ __forceinline__ void AttendTile(const uint8_t* ks, const uint8_t* vs, int tile_start,
                                           const uint32_t (&qf)[HD / 16][4], const Rows& rows, float scale_log2,
                                           bool mask, State<HD>& st) {
  float s[8][4];
  ScoreTile<T, HD, kRows8>(ks, tile_start, qf, rows, scale_log2, mask, st, s);
  AddValues<T, HD, kRows8>(vs, s, st);
}

}  // namespace pagoda::cuda::flash
