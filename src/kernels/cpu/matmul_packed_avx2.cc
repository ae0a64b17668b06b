// AVX2 + FMA + F16C kernels for packed float weights (packed_weights.h): panels of 16
// rows, rows in lanes (two ymm per k), the activation broadcast. GEMM tile 1 panel x 6
// tokens = 12 accumulators (activations packed k-major per tile); GEMV tile 2 panels x 1
// token. Same loop structure and per-output order as matmul_packed_avx512.cc (k slices of
// 256 chained through y).
// Q8_0 / Q4_0 panels: the AVX-512 level's 32-row layout (packed_weights.h), read as four
// halves of 8 rows (one ymm of int32 lanes per quad): vpmaddubsw + vpmaddwd instead of vpdpbusd.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PAGODA_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace pagoda::matmul_internal {
namespace {

constexpr int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int64_t kPrefetchAhead = 2048;
constexpr int64_t kL2WeightBudget = 192 * 1024;

// ---- float panels -------------------------------------------------------------

constexpr int64_t kFloatKc = 256;
constexpr int kFloatTokens = 6;

template <DType kW>
constexpr int64_t kElem = kW == DType::kF32 ? 4 : 2;

// One k of one panel as two vectors of f32 rows (rows 0-7, then the rest), widened exactly.
template <DType kW>
PAGODA_AVX2_INLINE void LoadPanelStep(const uint8_t* wp, __m256 (&w)[2], __m256i high) {
  if constexpr (kW == DType::kF32) {
    w[0] = _mm256_load_ps(reinterpret_cast<const float*>(wp));
    w[1] = _mm256_load_ps(reinterpret_cast<const float*>(wp + 32));
  } else if constexpr (kW == DType::kF16) {
    w[0] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(wp)));
    w[1] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(wp + 16)));
  } else {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    w[1] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
  }
}

// Panels [panel, panel + P) x T tokens whose activations are packed k-major for this
// k-slice: xp[(k - k0) * T + j] (one pointer, constant offsets, no cache set conflicts
// between token rows; for one token that is x itself from k0). `first`: start from zero,
// else from y. y: token j of panel q at y[j * ldy + q * panel rows]. kPrefetch (GEMV,
// streaming): prefetch each panel kPrefetchAhead bytes ahead.
template <DType kW, int P, int T, bool kPrefetch = false>
PAGODA_AVX2 void FloatGemmTile(const uint8_t* panel, int64_t panel_bytes, const float* xp,
                                 int64_t k0, int64_t k1, bool first, float* y, int64_t ldy) {
  __m256 acc[P][2][T];
  for (int q = 0; q < P; ++q)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j)
        acc[q][h][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + j * ldy + q * 16 + h * 8);
  constexpr int64_t kStep = 16 * kElem<kW>;
  const uint8_t* wp[P];
  for (int q = 0; q < P; ++q) wp[q] = panel + q * panel_bytes + k0 * kStep;
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k, xp += T) {
    __m256 w[P][2];
    for (int q = 0; q < P; ++q) {
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead), _MM_HINT_T0);
      }
      LoadPanelStep<kW>(wp[q], w[q], high);
      wp[q] += kStep;
    }
    for (int j = 0; j < T; ++j) {
      const __m256 xb = _mm256_set1_ps(xp[j]);
      for (int q = 0; q < P; ++q) {
        acc[q][0][j] = _mm256_fmadd_ps(w[q][0], xb, acc[q][0][j]);
        acc[q][1][j] = _mm256_fmadd_ps(w[q][1], xb, acc[q][1][j]);
      }
    }
  }
  for (int q = 0; q < P; ++q)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j) _mm256_storeu_ps(y + j * ldy + q * 16 + h * 8, acc[q][h][j]);
}

template <DType kW>
using FloatGemmFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, int64_t, bool, float*,
                             int64_t);

// Tile tables: [T - 1] for T = 1 .. max tokens of the shape.
template <DType kW, int P, int... Ts>
constexpr FloatGemmFn<kW> kFloatGemm[] = {&FloatGemmTile<kW, P, Ts>...};

// Panels [p0, p1) x tokens [t0, t1): the GEMV streams each panel once; the GEMM walks k in
// slices, rows in blocks that stay in L2 and the token tiles of in.x_tiles (kFloatTokens each).
template <DType kW>
PAGODA_AVX2 void FloatPanels(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1,
                             int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  if (t1 - t0 == 1) {
    const float* x = in.x + t0 * n;
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) {
      FloatGemmTile<kW, 2, 1, true>(pw.panel(p), pw.panel_bytes, x, 0, n, true, y + (p - p0) * 16, ldy);
    }
    for (; p < p1; ++p) {
      FloatGemmTile<kW, 1, 1, true>(pw.panel(p), pw.panel_bytes, x, 0, n, true, y + (p - p0) * 16, ldy);
    }
    return;
  }
  const FloatGemmFn<kW>* tiles = kFloatGemm<kW, 1, 1, 2, 3, 4, 5, 6>;
  const int64_t block = std::max<int64_t>(2, kL2WeightBudget / (16 * kFloatKc * kElem<kW>));
  ForEachGemmTile(n, kFloatKc, p0, p1, block, t0, t1, kFloatTokens,
                  [&](int64_t k0, int64_t k1, int64_t t, int64_t tt, int64_t rb, int64_t re) {
    const float* xt = in.x_tiles + (t / kFloatTokens) * n * kFloatTokens + k0 * tt;
    for (int64_t p = rb; p < re; ++p) {
      tiles[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + (t - t0) * ldy + (p - p0) * 16, ldy);
    }
  });
}

// ---- q8 / q4 panels ---------------------------------------------------------------
// A 32-row panel block (packed_weights.h): per 16-row group g, quad u (4 k) of rows 16g..16g+15
// at g * kGroupBytes + u * 64, 4 bytes per row; the half h = 2g + i holds rows 8h..8h+7 in
// bytes [32i, 32i + 32) of it. Then 32 f16 scales.
//   Q8: the stored code is q + 128; vpmaddubsw (u8 x s8 pair sums in i16) would saturate on it,
//   so the code is turned back into q (XOR 0x80) and multiplied as |q| x sign(x, q) (llama.cpp's
//   trick: |q| <= 128, |x| <= 127, a pair sum stays below 2^15).
//   Q4: nibbles n = q + 8 (0..15) times x directly (no saturation), the sum started from
//   -8 * sum(x) (bias128 / 16).
// Integer sums are exact, and the scale step is the AVX-512 level's per lane (float(isum) times
// dw * dx, fused-added, blocks in order): these panels give the AVX-512 level's bits.

constexpr int64_t kQ8BlocksPerSlice = 32;
// The quantized GEMV streams 8 KiB ahead into L2 (as the AVX-512 one): llama-1b q8_0 decode
// through these kernels went from 78% to 94% of the read bound against 2 KiB into L1 alone.
// And 2 KiB ahead into L1 besides (as the AVX-512 one): PAGODA_MATMUL_ISA=avx2 llama-1b
// decode at a 64-128 token context, off/on alternated on the AVX-512 host: q8_0 89.2 / 91.4 /
// 91.5 / 88.7% -> 94.8 / 92.6 / 91.8 / 91.2%, q4_0 75.1% -> 78.1% of the read bound.
constexpr int64_t kQ8PrefetchAhead = 8192;
constexpr int64_t kQ8L1PrefetchAhead = 2048;
PAGODA_AVX2_INLINE void Q8Prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kQ8PrefetchAhead, _MM_HINT_T1);
  _mm_prefetch(static_cast<const char*>(p) + kQ8L1PrefetchAhead, _MM_HINT_T0);
}
constexpr int kQ8Tokens = 4;  // GEMM tile: one 8-row half x 4 tokens
template <bool kQ4>
constexpr int64_t kGroupBytes = kQ4 ? 4 * 64 : 8 * 64;
template <bool kQ4>
constexpr int64_t kBlockBytes = 2 * kGroupBytes<kQ4> + 64;

PAGODA_AVX2_INLINE __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// An opaque use: GCC would otherwise reassociate the integer sums into a tree whose partial
// products spill to the stack (16 ymm registers).
PAGODA_AVX2_INLINE void KeepInRegister(__m256i& v) { __asm__("" : "+x"(v)); }

// isum[j] += the block's integer dot of half h for token j; xc[j]: token j's 32 codes of the block.
template <bool kQ4, int T, bool kPrefetch>
PAGODA_AVX2_INLINE void HalfBlockDot(const uint8_t* block, int h, const int8_t* const (&xc)[T], __m256i (&isum)[T]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* codes = block + (h / 2) * kGroupBytes<kQ4> + (h % 2) * 32;
  if constexpr (kQ4) {
    const __m256i low = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + u * 64));
      const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        // Each pair sum <= 2 * 15 * 127: two of them still fit an i16.
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, Broadcast4(xc[j] + 4 * u)),
                                           _mm256_maddubs_epi16(hi, Broadcast4(xc[j] + 16 + 4 * u)));
        isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ones));
        KeepInRegister(isum[j]);
      }
    }
  } else {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      const uint8_t* line = codes + u * 64;
      if constexpr (kPrefetch) Q8Prefetch(line);
      const __m256i q = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(line)), flip);
      const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m256i sx = _mm256_sign_epi8(Broadcast4(xc[j] + 4 * u), q);
        isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, sx), ones));
        KeepInRegister(isum[j]);
      }
    }
  }
}

// acc[j] += float(isum[j]) * (dw * dx[j]) for half h of the block.
template <int T>
PAGODA_AVX2_INLINE void HalfBlockScale(const uint8_t* scales, int h, const float (&dx)[T], const __m256i (&isum)[T],
                                       __m256 (&acc)[T]) {
  const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + h * 16)));
  for (int j = 0; j < T; ++j) {
    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, _mm256_set1_ps(dx[j])), acc[j]);
  }
}

// Half h of a panel x T tokens over blocks [b0, b1), activations in place (xq rows t0..t0+T-1).
// `first`: start from zero, else from y (token j at y[j * ldy], the half's 8 rows).
template <bool kQ4, int T>
PAGODA_AVX2 void Q8HalfTile(const PackedWeights& pw, int64_t panel, int h, const QuantizedActivations& xq, int64_t t0,
                            int64_t b0, int64_t b1, bool first, float* y, int64_t ldy) {
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + j * ldy);
  const uint8_t* block = pw.panel(panel) + b0 * kBlockBytes<kQ4>;
  for (int64_t b = b0; b < b1; ++b, block += kBlockBytes<kQ4>) {
    const int8_t* xc[T];
    float dx[T];
    __m256i isum[T];
    for (int j = 0; j < T; ++j) {
      xc[j] = xq.q_row(t0 + j) + b * 32;
      dx[j] = xq.d_row(t0 + j)[b];
      isum[j] = kQ4 ? _mm256_set1_epi32(xq.bias128_row(t0 + j)[b] / 16) : _mm256_setzero_si256();
    }
    HalfBlockDot<kQ4, T, false>(block, h, xc, isum);
    HalfBlockScale<T>(block + 2 * kGroupBytes<kQ4>, h, dx, isum, acc);
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(y + j * ldy, acc[j]);
}

// The GEMV: one panel (all four halves) x token t, streaming the panel with a prefetch ahead.
template <bool kQ4>
PAGODA_AVX2 void Q8GemvAvx2(const PackedWeights& pw, int64_t panel, const QuantizedActivations& xq, int64_t t,
                            float* y) {
  __m256 acc[4][1];
  for (auto& a : acc) a[0] = _mm256_setzero_ps();
  const uint8_t* block = pw.panel(panel);
  const int64_t nb = pw.num_blocks();
  for (int64_t b = 0; b < nb; ++b, block += kBlockBytes<kQ4>) {
    const int8_t* const xc[1] = {xq.q_row(t) + b * 32};
    const float dx[1] = {xq.d_row(t)[b]};
    const int32_t init = kQ4 ? xq.bias128_row(t)[b] / 16 : 0;
    const uint8_t* scales = block + 2 * kGroupBytes<kQ4>;
    if constexpr (kQ4) {
      for (int64_t o = 0; o < kBlockBytes<kQ4>; o += 64) {
        Q8Prefetch(block + o);
      }
    } else {
      Q8Prefetch(scales);
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m256i isum[1] = {_mm256_set1_epi32(init)};
      // Q8: each code line is prefetched once, by the half that reads its first 32 bytes.
      if (h % 2 == 0) {
        HalfBlockDot<kQ4, 1, !kQ4>(block, h, xc, isum);
      } else {
        HalfBlockDot<kQ4, 1, false>(block, h, xc, isum);
      }
      HalfBlockScale<1>(scales, h, dx, isum, acc[h]);
    }
  }
  for (int h = 0; h < 4; ++h) _mm256_storeu_ps(y + 8 * h, acc[h][0]);
}

template <bool kQ4>
using Q8HalfFn = void (*)(const PackedWeights&, int64_t, int, const QuantizedActivations&, int64_t, int64_t, int64_t,
                          bool, float*, int64_t);
template <bool kQ4, int... Ts>
constexpr Q8HalfFn<kQ4> kQ8Halves[] = {&Q8HalfTile<kQ4, Ts>...};

// Panels [p0, p1) x tokens [t0, t1): the GEMV streams each panel once; the GEMM walks blocks in
// slices, rows in blocks of panels that stay in L2, tokens in tiles of kQ8Tokens.
template <bool kQ4>
PAGODA_AVX2 void Q8PanelsAvx2(const PackedWeights& pw, const QuantizedActivations& xq, int64_t t0, int64_t t1,
                              int64_t p0, int64_t p1, float* y, int64_t ldy) {
  if (t1 - t0 == 1) {
    for (int64_t p = p0; p < p1; ++p) Q8GemvAvx2<kQ4>(pw, p, xq, t0, y + (p - p0) * 32);
    return;
  }
  const Q8HalfFn<kQ4>* tiles = kQ8Halves<kQ4, 1, 2, 3, 4>;
  static_assert(kQ8Tokens == 4);
  const int64_t block = std::max<int64_t>(1, kL2WeightBudget / (kQ8BlocksPerSlice * kBlockBytes<kQ4>));
  ForEachGemmTile(pw.num_blocks(), kQ8BlocksPerSlice, p0, p1, block, t0, t1, kQ8Tokens,
                  [&](int64_t b0, int64_t b1, int64_t t, int64_t tt, int64_t rb, int64_t re) {
    for (int64_t p = rb; p < re; ++p) {
      for (int h = 0; h < 4; ++h) {
        tiles[tt - 1](pw, p, h, xq, t, b0, b1, b0 == 0, y + (t - t0) * ldy + (p - p0) * 32 + 8 * h, ldy);
      }
    }
  });
}

}  // namespace

int64_t PackedTileTokensAvx2(const PackedWeights& pw) {
  return pw.format == PackedWeights::Format::kFloat ? kFloatTokens : 0;
}

void PackedRowsAvx2(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                    int64_t p1, float* y, int64_t ldy) {
  if (pw.format == PackedWeights::Format::kQ8) {
    Q8PanelsAvx2<false>(pw, *in.xq, t0, t1, p0, p1, y, ldy);
    return;
  }
  if (pw.format == PackedWeights::Format::kQ4) {
    Q8PanelsAvx2<true>(pw, *in.xq, t0, t1, p0, p1, y, ldy);
    return;
  }
  switch (pw.dtype) {
    case DType::kF32: FloatPanels<DType::kF32>(pw, in, t0, t1, p0, p1, y, ldy); return;
    case DType::kF16: FloatPanels<DType::kF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
    default: FloatPanels<DType::kBF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
  }
}

}  // namespace pagoda::matmul_internal
