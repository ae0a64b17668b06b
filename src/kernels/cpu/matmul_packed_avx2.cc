// AVX2 + FMA + F16C kernels for packed float weights (packed_weights.h): panels of 16
// rows, rows in lanes (two ymm per k), the activation broadcast. GEMM tile 1 panel x 6
// tokens = 12 accumulators (activations packed k-major per tile); GEMV tile 2 panels x 1
// token. Same loop structure and per-output order as matmul_packed_avx512.cc (k slices of
// 256 chained through y).
// Q8_0 weights are not packed at this level (matmul_avx2.cc handles them row-major).
#include <immintrin.h>

#include <algorithm>

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
  for (int64_t k0 = 0; k0 < n; k0 += kFloatKc) {
    const int64_t k1 = Min(k0 + kFloatKc, n);
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = Min(rb + block, p1);
      for (int64_t t = t0; t < t1; t += kFloatTokens) {
        const int64_t tt = Min(kFloatTokens, t1 - t);
        const float* xt = in.x_tiles + (t / kFloatTokens) * n * kFloatTokens + k0 * tt;
        for (int64_t p = rb; p < re; ++p) {
          tiles[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + (t - t0) * ldy + (p - p0) * 16, ldy);
        }
      }
    }
  }
}

}  // namespace

int64_t PackedTileTokensAvx2(const PackedWeights& pw) {
  return pw.format == PackedWeights::Format::kFloat ? kFloatTokens : 0;
}

void PackedRowsAvx2(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                    int64_t p1, float* y, int64_t ldy) {
  switch (pw.dtype) {  // float panels only
    case DType::kF32: FloatPanels<DType::kF32>(pw, in, t0, t1, p0, p1, y, ldy); return;
    case DType::kF16: FloatPanels<DType::kF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
    default: FloatPanels<DType::kBF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
  }
}

}  // namespace pagoda::matmul_internal
