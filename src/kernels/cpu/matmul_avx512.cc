// AVX-512 (F/BW/DQ/VL) + VNNI kernels (16 f32 lanes, vpdpbusd int8 dot products).
// Compiled with target attributes; only called when the CPU and OS support them.
//
// Register tiles (32 zmm registers):
//   F32/F16 weights, GEMM: 4 rows x 6 tokens = 24 accumulators; GEMV: 8 rows x 1 token.
//   BF16 weights,    GEMM: 4 rows x 4 tokens (even/odd halves); GEMV: 8 rows x 1 token.
//   quantized,     GEMM: 4 rows x 4 tokens = 16 accumulators; GEMV: 8 rows x 1 token.
// Quantized weights are processed two 32-blocks per zmm (lanes 0-7 block 2p, lanes
// 8-15 block 2p+1); an odd last block runs with the upper half zeroed. As in every
// level, an output's accumulator sees the same operations whatever tile it is in.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define PAGODA_AVX512_INLINE                                                                 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"), \
                 always_inline)) inline

namespace pagoda::matmul_internal {
namespace {

constexpr int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Fixed lane tree: 16 -> 8 (l + l+8) -> 4 -> 2 -> 1.
PAGODA_AVX512_INLINE float HSum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
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

// 16 weights from k, lanes past `mask` zero (mask = all ones on full steps).
template <DType kW>
PAGODA_AVX512_INLINE __m512 LoadW(const uint8_t* row, int64_t k, __mmask16 mask) {
  if constexpr (kW == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kW == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * k));
  } else {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
}

template <DType kW>
PAGODA_AVX512_INLINE __m512 LoadWFull(const uint8_t* row, int64_t k) {
  if constexpr (kW == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kW == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  } else {
    const __m512i v =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
}

template <DType kW, int R, int T>
PAGODA_AVX512 void TileFloat(const WeightMatrix& w, const float* x, int64_t r0, int64_t t0,
                             const KSlice& ks, float* y) {
  const int64_t n = w.cols;
  const int64_t n16 = n & ~int64_t{15};
  const bool first = ks.k0 == 0, last = ks.k1 == n;
  const uint8_t* wr[R];
  const float* xt[T];
  for (int i = 0; i < R; ++i) wr[i] = w.row(r0 + i);
  for (int j = 0; j < T; ++j) xt[j] = x + (t0 + j) * n;
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j)
      acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(ks.Slot(r0 + i, t0 + j, 16));
  constexpr int64_t kElemBytes = kW == DType::kF32 ? 4 : 2;
  const int64_t prefetch_bytes = PrefetchBytes(w, r0, R, T);
  const int64_t k_end = Min(ks.k1, n16);
  for (int64_t k = ks.k0; k < k_end; k += 16) {
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = LoadWFull<kW>(wr[i], k);
    if (prefetch_bytes != 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + prefetch_bytes + k * kElemBytes),
                     _MM_HINT_T0);
      }
    }
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_loadu_ps(xt[j] + k);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (last && n16 < n) {  // zero-masked last step
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - n16)) - 1);
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = LoadW<kW>(wr[i], n16, mask);
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xt[j] + n16);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      if (last) {
        y[(t0 + j) * w.rows + r0 + i] = HSum(acc[i][j]);
      } else {
        _mm512_store_ps(ks.Slot(r0 + i, t0 + j, 16), acc[i][j]);
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
PAGODA_AVX512 void RowsFloat(const WeightMatrix& w, const float* x, int64_t num_tokens,
                             int64_t r0, int64_t r1, float* y) {
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
  // in `state` between slices (stored and reloaded exactly).
  constexpr int64_t kKc = 1024, kTc = 48;
  const int64_t block = RowsPerL2Block(w.row_bytes, 4);
  float* const state = ThreadScratch(1, Min(block, r1 - r0) * kTc * 16);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min(rb + block, r1);
    for (int64_t tc = 0; tc < num_tokens; tc += kTc) {
      const int64_t te = Min(tc + kTc, num_tokens);
      for (int64_t k0 = 0; k0 < n; k0 += kKc) {
        const KSlice ks{k0, Min(k0 + kKc, n), state, rb, tc, kTc};
        for (int64_t t = tc; t < te; t += 6) {
          const int64_t tt = Min(6, te - t);
          int64_t r = rb;
          for (; r + 4 <= re; r += 4) kTileFloat<kW, 4>[tt - 1](w, x, r, t, ks, y);
          for (; r < re; ++r) kTileFloat<kW, 1>[tt - 1](w, x, r, t, ks, y);
        }
      }
    }
  }
}

// ---- bf16 weights: even/odd split ---------------------------------------------------
//
// Widening bf16 is a 16-bit shift. Read as 32-bit lanes, 32 bf16 weights hold the even
// elements in their low halves and the odd ones in their high halves, so one AND and
// one shift widen 32 weights (instead of two zero-extends and two shifts for 16 each).
// x is repacked to match, per chunk of 32: [x0 x2 .. x30 | x1 x3 .. x31] (a partial
// last chunk zero-padded), and each output does acc += w_even * x_even, then
// acc += w_odd * x_odd per chunk: again one fixed order for GEMV and GEMM alike.

// xp[t] = repacked x[t]: [num_tokens, RoundUp32(cols)].
PAGODA_AVX512 void RepackEvenOdd(const float* x, int64_t num_tokens, int64_t n, float* xp) {
  const int64_t n32 = (n + 31) & ~int64_t{31};
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* src = x + t * n;
    float* dst = xp + t * n32;
    for (int64_t k = 0; k < n32; k += 32) {
      const int64_t m = Min(32, n - k);
      const __mmask16 lo = static_cast<__mmask16>(m >= 16 ? 0xffff : (1u << m) - 1);
      const __mmask16 hi = static_cast<__mmask16>(m >= 32 ? 0xffff : m <= 16 ? 0 : (1u << (m - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, src + k);
      const __m512 b = _mm512_maskz_loadu_ps(hi, src + k + 16);
      _mm512_storeu_ps(dst + k, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(dst + k + 16, _mm512_permutex2var_ps(a, odd, b));
    }
  }
}

template <int R, int T>
PAGODA_AVX512 void TileBf16(const WeightMatrix& w, const float* xp, int64_t r0, int64_t t0,
                            const KSlice& ks, float* y) {
  const int64_t n = w.cols;
  const int64_t n_pad = (n + 31) & ~int64_t{31};
  const int64_t n32 = n & ~int64_t{31};
  const bool first = ks.k0 == 0, last = ks.k1 == n;
  const uint8_t* wr[R];
  const float* xt[T];
  for (int i = 0; i < R; ++i) wr[i] = w.row(r0 + i);
  for (int j = 0; j < T; ++j) xt[j] = xp + (t0 + j) * n_pad;
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j)
      acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(ks.Slot(r0 + i, t0 + j, 16));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t prefetch_bytes = PrefetchBytes(w, r0, R, T);
  const int64_t k_end = Min(ks.k1, n32);
  // Full chunks, then (last pass only) a zero-masked partial chunk; the body is spelled
  // out twice so the accumulators stay in registers.
  for (int64_t k = ks.k0; k < k_end; k += 32) {
    __m512 we[R], wo[R];
    for (int i = 0; i < R; ++i) {
      if (prefetch_bytes != 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + prefetch_bytes + 2 * k), _MM_HINT_T0);
      }
      const __m512i v = _mm512_loadu_si512(wr[i] + 2 * k);
      we[i] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      wo[i] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
    for (int j = 0; j < T; ++j) {
      const __m512 xe = _mm512_loadu_ps(xt[j] + k);
      const __m512 xo = _mm512_loadu_ps(xt[j] + k + 16);
      for (int i = 0; i < R; ++i) {
        acc[i][j] = _mm512_fmadd_ps(we[i], xe, acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(wo[i], xo, acc[i][j]);
      }
    }
  }
  if (last && n32 < n) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (n - n32)) - 1);
    __m512 we[R], wo[R];
    for (int i = 0; i < R; ++i) {
      const __m512i v = _mm512_maskz_loadu_epi16(mask, wr[i] + 2 * n32);
      we[i] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      wo[i] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
    for (int j = 0; j < T; ++j) {
      const __m512 xe = _mm512_loadu_ps(xt[j] + n32);
      const __m512 xo = _mm512_loadu_ps(xt[j] + n32 + 16);
      for (int i = 0; i < R; ++i) {
        acc[i][j] = _mm512_fmadd_ps(we[i], xe, acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(wo[i], xo, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      if (last) {
        y[(t0 + j) * w.rows + r0 + i] = HSum(acc[i][j]);
      } else {
        _mm512_store_ps(ks.Slot(r0 + i, t0 + j, 16), acc[i][j]);
      }
    }
  }
}

template <int R>
constexpr TileFloatFn<DType::kBF16, R> kTileBf16[4] = {&TileBf16<R, 1>, &TileBf16<R, 2>,
                                                       &TileBf16<R, 3>, &TileBf16<R, 4>};

PAGODA_AVX512 void RowsBf16(const WeightMatrix& w, const float* x, int64_t num_tokens, int64_t r0,
                            int64_t r1, float* y) {
  const int64_t n = w.cols;
  const int64_t n_pad = (n + 31) & ~int64_t{31};
  float* const xp = ThreadScratch(0, num_tokens * n_pad);
  RepackEvenOdd(x, num_tokens, n, xp);
  if (num_tokens == 1) {
    const KSlice all{0, n};
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) TileBf16<8, 1>(w, xp, r, 0, all, y);
    for (; r < r1; ++r) TileBf16<1, 1>(w, xp, r, 0, all, y);
    return;
  }
  // GEMM tiles of 4 rows x 4 tokens: 16 accumulators + 8 widened weights + 2 x (more
  // accumulators spill).
  constexpr int64_t kKc = 1024, kTc = 48;
  const int64_t block = RowsPerL2Block(w.row_bytes, 4);
  float* const state = ThreadScratch(1, Min(block, r1 - r0) * kTc * 16);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min(rb + block, r1);
    for (int64_t tc = 0; tc < num_tokens; tc += kTc) {
      const int64_t te = Min(tc + kTc, num_tokens);
      for (int64_t k0 = 0; k0 < n; k0 += kKc) {
        const KSlice ks{k0, Min(k0 + kKc, n), state, rb, tc, kTc};
        for (int64_t t = tc; t < te; t += 4) {
          const int64_t tt = Min(4, te - t);
          int64_t r = rb;
          for (; r + 4 <= re; r += 4) kTileBf16<4>[tt - 1](w, xp, r, t, ks, y);
          for (; r < re; ++r) kTileBf16<1>[tt - 1](w, xp, r, t, ks, y);
        }
      }
    }
  }
}

// ---- quantized weights ----------------------------------------------------------
//
// vpdpbusd(acc, u8, s8): lane l += sum of the 4 products of bytes 4l..4l+3; no
// saturation, so sums are exact.
//   Q8_0: u8 = x + 128 (x codes XOR 0x80), s8 = w, accumulator starts at
//         -128 * sum(w) per lane (computed once per weight block with vpdpbusd).
//   Q4_0: u8 = nibble (0..15), s8 = x, accumulator starts at -8 * sum(x) per lane.

struct QPair {     // two weight blocks prepared for all tokens of a tile
  __m512i codes;   // Q8_0: s8 codes; Q4_0: u8 nibbles
  __m512i init;    // Q8_0: -128 * lane sums of codes
  __m512 d;        // scales: lanes 0-7 block 2p, lanes 8-15 block 2p+1
};

PAGODA_AVX512_INLINE float HalfToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

template <DType kW>
PAGODA_AVX512_INLINE __m256i BlockCodes(const uint8_t* block) {
  if constexpr (kW == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
  }
}

// `two` = false: only the first block is real; the upper half is zero.
template <DType kW>
PAGODA_AVX512_INLINE QPair PreparePair(const uint8_t* block, bool two) {
  constexpr int64_t kBlockBytes = kW == DType::kQ8_0 ? 34 : 18;
  QPair p;
  const __m256i lo = BlockCodes<kW>(block);
  const __m256i hi = two ? BlockCodes<kW>(block + kBlockBytes) : _mm256_setzero_si256();
  p.codes = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  const float d0 = HalfToFloat(block);
  const float d1 = two ? HalfToFloat(block + kBlockBytes) : 0.0f;
  p.d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
  if constexpr (kW == DType::kQ8_0) {
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), p.codes);
    p.init = _mm512_sub_epi32(_mm512_setzero_si512(), sums);
  }
  return p;
}

template <DType kW, int R, int T>
PAGODA_AVX512 void TileQuant(const WeightMatrix& w, const QuantizedActivations& xq, int64_t r0,
                             int64_t t0, float* y) {
  constexpr int64_t kBlockBytes = kW == DType::kQ8_0 ? 34 : 18;
  const int64_t nb = xq.num_blocks;
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w.row(r0 + i);
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  const __m512i flip = _mm512_set1_epi8(-128);
  const int64_t prefetch_bytes = PrefetchBytes(w, r0, R, T);
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const __mmask64 qmask = two ? ~__mmask64{0} : __mmask64{0xffffffffu};
    const __mmask16 lmask = two ? __mmask16{0xffff} : __mmask16{0x00ff};
    // Token side first (shared by the R rows), then one weight pair at a time.
    __m512i xa[T];   // Q8_0: x codes + 128 (u8); Q4_0: x codes (s8)
    __m512i xinit[T];
    __m512 dxv[T];
    for (int j = 0; j < T; ++j) {
      const int64_t t = t0 + j;
      const __m512i xv = _mm512_maskz_loadu_epi8(qmask, xq.q_row(t) + b * 32);
      const float* dx = xq.d_row(t) + b;
      dxv[j] = _mm512_insertf32x8(_mm512_set1_ps(dx[0]), _mm256_set1_ps(two ? dx[1] : 0.0f), 1);
      if constexpr (kW == DType::kQ4_0) {
        const __m512i off = _mm512_maskz_loadu_epi32(lmask, xq.offset_row(t) + b * 8);
        xinit[j] = _mm512_sub_epi32(_mm512_setzero_si512(), off);
        xa[j] = xv;
      } else {
        xa[j] = _mm512_maskz_mov_epi8(qmask, _mm512_xor_si512(xv, flip));
      }
    }
    for (int i = 0; i < R; ++i) {
      const uint8_t* block = wr[i] + b * kBlockBytes;
      if (prefetch_bytes != 0) _mm_prefetch(reinterpret_cast<const char*>(block + prefetch_bytes), _MM_HINT_T0);
      const QPair wp = PreparePair<kW>(block, two);
      for (int j = 0; j < T; ++j) {
        __m512i sumi;
        if constexpr (kW == DType::kQ8_0) {
          sumi = _mm512_dpbusd_epi32(wp.init, xa[j], wp.codes);
        } else {
          sumi = _mm512_dpbusd_epi32(xinit[j], wp.codes, xa[j]);
        }
        const __m512 scale = _mm512_mul_ps(wp.d, dxv[j]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), scale, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t0 + j) * w.rows + r0 + i] = HSum(acc[i][j]);
}

template <DType kW>
PAGODA_AVX512 void RowsQuant(const WeightMatrix& w, const QuantizedActivations& xq,
                             int64_t num_tokens, int64_t r0, int64_t r1, float* y) {
  if (num_tokens == 1) {
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) TileQuant<kW, 8, 1>(w, xq, r, 0, y);
    for (; r < r1; ++r) TileQuant<kW, 1, 1>(w, xq, r, 0, y);
    return;
  }
  const int64_t block = RowsPerL2Block(w.row_bytes, 4);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min(rb + block, r1);
    int64_t t = 0;
    for (; t + 4 <= num_tokens; t += 4) {
      int64_t r = rb;
      for (; r + 4 <= re; r += 4) TileQuant<kW, 4, 4>(w, xq, r, t, y);
      for (; r < re; ++r) TileQuant<kW, 1, 4>(w, xq, r, t, y);
    }
    for (; t < num_tokens; ++t) {
      int64_t r = rb;
      for (; r + 8 <= re; r += 8) TileQuant<kW, 8, 1>(w, xq, r, t, y);
      for (; r < re; ++r) TileQuant<kW, 1, 1>(w, xq, r, t, y);
    }
  }
}

}  // namespace

void MatMulRowsAvx512(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                      int64_t num_tokens, int64_t r0, int64_t r1, float* y) {
  switch (w.dtype) {
    case DType::kF32: RowsFloat<DType::kF32>(w, x, num_tokens, r0, r1, y); return;
    case DType::kF16: RowsFloat<DType::kF16>(w, x, num_tokens, r0, r1, y); return;
    case DType::kBF16: RowsBf16(w, x, num_tokens, r0, r1, y); return;
    case DType::kQ8_0: RowsQuant<DType::kQ8_0>(w, *xq, num_tokens, r0, r1, y); return;
    case DType::kQ4_0: RowsQuant<DType::kQ4_0>(w, *xq, num_tokens, r0, r1, y); return;
    default: return;  // rejected by MatMulAt
  }
}

}  // namespace pagoda::matmul_internal
