// AVX2 + FMA + F16C kernels (8 f32 lanes). Compiled with target attributes so the
// library still runs on any x86-64; only called when the CPU has these extensions.
//
// Register tiles (16 ymm registers):
//   float weights, GEMM: 2 rows x 6 tokens = 12 accumulators (+ 2 weights, 1 x);
//                  GEMV: 8 rows x 1 token.
//   quantized,     GEMM: 2 rows x 4 tokens = 8 accumulators (+ weight codes, ones);
//                  GEMV: 4 rows x 1 token.
// Whatever tile an output lands in, its accumulator sees the same operations in the
// same order (see matmul_internal.h), so results are batch- and thread-invariant.
#include <immintrin.h>

#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PAGODA_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace pagoda::matmul_internal {
namespace {

constexpr int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Fixed lane tree: (l0+l4, l1+l5, l2+l6, l3+l7) -> (0+2, 1+3) -> 0+1.
PAGODA_AVX2_INLINE float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// GEMV streams W once; every row is a new 4 KiB page for llama shapes, where the
// hardware prefetchers stop, so the tile prefetches the rows of the next tile at the
// same offsets. Returns the byte distance, or 0 when not streaming / past the end.
inline int64_t PrefetchBytes(const WeightMatrix& w, int64_t r0, int R, int T) {
  if (T != 1 || r0 + 2 * R > w.rows) return 0;
  return R * w.row_bytes;
}

// ---- float weights ----------------------------------------------------------

template <DType kW>
PAGODA_AVX2_INLINE __m256 LoadW(const uint8_t* row, int64_t k) {
  if constexpr (kW == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kW == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
}

// Scalar widening for the last partial vector (exactly what LoadW does per lane).
inline float WeightAt(DType dtype, const uint8_t* row, int64_t k) {
  uint16_t h;
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * k, 4);
      return f;
    }
    case DType::kF16: std::memcpy(&h, row + 2 * k, 2); return F16ToF32(h);
    default: std::memcpy(&h, row + 2 * k, 2); return Bf16ToF32(h);
  }
}

// y[t0 + j, r0 + i] for i < R, j < T, one pass over ks's k range (matmul_internal.h).
template <DType kW, int R, int T>
PAGODA_AVX2 void TileFloat(const WeightMatrix& w, const float* x, int64_t r0, int64_t t0,
                           const KSlice& ks, float* y) {
  const int64_t n = w.cols;
  const int64_t n8 = n & ~int64_t{7};
  const bool first = ks.k0 == 0, last = ks.k1 == n;
  const uint8_t* wr[R];
  const float* xt[T];
  for (int i = 0; i < R; ++i) wr[i] = w.row(r0 + i);
  for (int j = 0; j < T; ++j) xt[j] = x + (t0 + j) * n;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j)
      acc[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(ks.Slot(r0 + i, t0 + j, 8));
  constexpr int64_t kElemBytes = kW == DType::kF32 ? 4 : 2;
  const int64_t prefetch_bytes = PrefetchBytes(w, r0, R, T);
  const int64_t k_end = Min(ks.k1, n8);
  for (int64_t k = ks.k0; k < k_end; k += 8) {
    __m256 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = LoadW<kW>(wr[i], k);
    if (prefetch_bytes != 0 && (k & 15) == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + prefetch_bytes + k * kElemBytes),
                     _MM_HINT_T0);
      }
    }
    for (int j = 0; j < T; ++j) {
      const __m256 xv = _mm256_loadu_ps(xt[j] + k);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (last && n8 < n) {  // zero-padded last step
    alignas(32) float wp[8], xp[8];
    for (int i = 0; i < R; ++i) {
      for (int l = 0; l < 8; ++l) wp[l] = n8 + l < n ? WeightAt(kW, wr[i], n8 + l) : 0.0f;
      const __m256 wv = _mm256_load_ps(wp);
      for (int j = 0; j < T; ++j) {
        for (int l = 0; l < 8; ++l) xp[l] = n8 + l < n ? xt[j][n8 + l] : 0.0f;
        acc[i][j] = _mm256_fmadd_ps(wv, _mm256_load_ps(xp), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      if (last) {
        y[(t0 + j) * w.rows + r0 + i] = HSum(acc[i][j]);
      } else {
        _mm256_store_ps(ks.Slot(r0 + i, t0 + j, 8), acc[i][j]);
      }
    }
  }
}

template <DType kW, int R>
using TileFloatFn = void (*)(const WeightMatrix&, const float*, int64_t, int64_t, const KSlice&,
                             float*);
template <DType kW, int R>
constexpr TileFloatFn<kW, R> kTileFloat[6] = {&TileFloat<kW, R, 1>, &TileFloat<kW, R, 2>,
                                              &TileFloat<kW, R, 3>, &TileFloat<kW, R, 4>,
                                              &TileFloat<kW, R, 5>, &TileFloat<kW, R, 6>};

template <DType kW>
PAGODA_AVX2 void RowsFloat(const WeightMatrix& w, const float* x, int64_t num_tokens, int64_t r0,
                           int64_t r1, float* y) {
  const int64_t n = w.cols;
  if (num_tokens == 1) {
    const KSlice all{0, n};
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) TileFloat<kW, 8, 1>(w, x, r, 0, all, y);
    for (; r < r1; ++r) TileFloat<kW, 1, 1>(w, x, r, 0, all, y);
    return;
  }
  // GEMM: rows in L2-sized blocks, tokens in chunks of kTc, k in slices of kKc so that
  // a 6-token x panel and the block's weight slice stay in L1; accumulators persist
  // in `state` between slices.
  constexpr int64_t kKc = 512, kTc = 48;
  const int64_t block = RowsPerL2Block(w.row_bytes, 2);
  float* const state = ThreadScratch(1, Min(block, r1 - r0) * kTc * 8);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min(rb + block, r1);
    for (int64_t tc = 0; tc < num_tokens; tc += kTc) {
      const int64_t te = Min(tc + kTc, num_tokens);
      for (int64_t k0 = 0; k0 < n; k0 += kKc) {
        const KSlice ks{k0, Min(k0 + kKc, n), state, rb, tc, kTc};
        for (int64_t t = tc; t < te; t += 6) {
          const int64_t tt = Min(6, te - t);
          int64_t r = rb;
          for (; r + 2 <= re; r += 2) kTileFloat<kW, 2>[tt - 1](w, x, r, t, ks, y);
          for (; r < re; ++r) kTileFloat<kW, 1>[tt - 1](w, x, r, t, ks, y);
        }
      }
    }
  }
}

// ---- quantized weights ----------------------------------------------------------
//
// Per 32-block: vpmaddubsw(u8, s8) -> 16 x i16 pair sums (no saturation: |u8| <= 128,
// |s8| <= 127), vpmaddwd with ones -> 8 x i32 lanes, lane l = sum of bytes 4l..4l+3.
//   Q8_0: u8 = |w|, s8 = sign(x, w)            (llama.cpp's trick; exact)
//   Q4_0: u8 = nibble (0..15), s8 = x, minus 8 * sum(x) per lane (offset_sums)

struct QBlock {  // one weight block prepared for all tokens of a tile
  __m256i u;     // unsigned operand
  __m256i s;     // Q8_0: the signed codes (for the sign trick)
  float d;
};

template <DType kW>
PAGODA_AVX2_INLINE QBlock PrepareBlock(const uint8_t* block) {
  QBlock b;
  uint16_t h;
  std::memcpy(&h, block, 2);
  b.d = _cvtsh_ss(h);
  if constexpr (kW == DType::kQ8_0) {
    b.s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    b.u = _mm256_sign_epi8(b.s, b.s);
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    b.u = _mm256_set_m128i(hi, lo);
    b.s = b.u;
  }
  return b;
}

template <DType kW, int R, int T>
PAGODA_AVX2 void TileQuant(const WeightMatrix& w, const QuantizedActivations& xq, int64_t r0,
                           int64_t t0, float* y) {
  constexpr int64_t kBlockBytes = kW == DType::kQ8_0 ? 34 : 18;
  const int64_t nb = xq.num_blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w.row(r0 + i);
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t prefetch_bytes = PrefetchBytes(w, r0, R, T);
  for (int64_t b = 0; b < nb; ++b) {
    QBlock wb[R];
    for (int i = 0; i < R; ++i) wb[i] = PrepareBlock<kW>(wr[i] + b * kBlockBytes);
    if (prefetch_bytes != 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + b * kBlockBytes + prefetch_bytes),
                     _MM_HINT_T0);
      }
    }
    for (int j = 0; j < T; ++j) {
      const int64_t t = t0 + j;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q_row(t) + b * 32));
      const float dx = xq.d_row(t)[b];
      __m256i off;
      if constexpr (kW == DType::kQ4_0) {
        off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.offset_row(t) + b * 8));
      }
      for (int i = 0; i < R; ++i) {
        __m256i sumi;
        if constexpr (kW == DType::kQ8_0) {
          const __m256i sx = _mm256_sign_epi8(xv, wb[i].s);
          sumi = _mm256_madd_epi16(_mm256_maddubs_epi16(wb[i].u, sx), ones);
        } else {
          sumi = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wb[i].u, xv), ones), off);
        }
        const __m256 scale = _mm256_set1_ps(wb[i].d * dx);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), scale, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t0 + j) * w.rows + r0 + i] = HSum(acc[i][j]);
}

template <DType kW>
PAGODA_AVX2 void RowsQuant(const WeightMatrix& w, const QuantizedActivations& xq,
                           int64_t num_tokens, int64_t r0, int64_t r1, float* y) {
  if (num_tokens == 1) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) TileQuant<kW, 4, 1>(w, xq, r, 0, y);
    for (; r < r1; ++r) TileQuant<kW, 1, 1>(w, xq, r, 0, y);
    return;
  }
  const int64_t block = RowsPerL2Block(w.row_bytes, 2);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min(rb + block, r1);
    int64_t t = 0;
    for (; t + 4 <= num_tokens; t += 4) {
      int64_t r = rb;
      for (; r + 2 <= re; r += 2) TileQuant<kW, 2, 4>(w, xq, r, t, y);
      if (r < re) TileQuant<kW, 1, 4>(w, xq, r, t, y);
    }
    for (; t < num_tokens; ++t) {
      int64_t r = rb;
      for (; r + 4 <= re; r += 4) TileQuant<kW, 4, 1>(w, xq, r, t, y);
      for (; r < re; ++r) TileQuant<kW, 1, 1>(w, xq, r, t, y);
    }
  }
}

}  // namespace

void MatMulRowsAvx2(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                    int64_t num_tokens, int64_t r0, int64_t r1, float* y) {
  switch (w.dtype) {
    case DType::kF32: RowsFloat<DType::kF32>(w, x, num_tokens, r0, r1, y); return;
    case DType::kF16: RowsFloat<DType::kF16>(w, x, num_tokens, r0, r1, y); return;
    case DType::kBF16: RowsFloat<DType::kBF16>(w, x, num_tokens, r0, r1, y); return;
    case DType::kQ8_0: RowsQuant<DType::kQ8_0>(w, *xq, num_tokens, r0, r1, y); return;
    case DType::kQ4_0: RowsQuant<DType::kQ4_0>(w, *xq, num_tokens, r0, r1, y); return;
    default: return;  // rejected by MatMulAt
  }
}

}  // namespace pagoda::matmul_internal
