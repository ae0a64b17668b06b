// AVX-512 (+ VNNI) kernels for packed weights (packed_weights.h): rows in lanes, so an
// activation is broadcast and every FMA / vpdpbusd works on 16 rows at once with no
// horizontal sums.
//
//   Float panels (32 rows; F32, F16, BF16): per k one panel step gives two vectors of 16
//   rows (BF16: one 64-byte load, a shift and an AND); a GEMM tile is 1 panel x 12 tokens
//   = 24 accumulators, a GEMV tile 2 panels x 1 token.
//   Q8 panels (16 rows): per 32-block and token, 8 vpdpbusd (4 k of 16 rows each) into an
//   integer sum that starts at -128 * sum(x codes), then acc += float(isum) * (dw * dx);
//   GEMM tile 2 panels x 4 tokens, GEMV tile 2 panels x 1 token.
// GEMM walks k in slices (float: 256 k, q8: 32 blocks) chained through y, rows in blocks
// that stay in L2 and token tiles that stay in L1; GEMV streams each panel once with a
// software prefetch ahead (panels are contiguous, so it runs into the next panel).
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace pagoda::matmul_internal {
namespace {

constexpr int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Bytes ahead of the current weight the GEMV prefetches (within and across panels).
constexpr int64_t kPrefetchAhead = 2048;
constexpr int64_t kL2WeightBudget = 256 * 1024;

// ---- float panels -------------------------------------------------------------

constexpr int64_t kFloatKc = 256;
constexpr int kFloatTokens = 12;

template <DType kW>
constexpr int64_t kElem = kW == DType::kF32 ? 4 : 2;

// Panels [panel, panel + P) x tokens [0, T) of x (row stride n), k in [k0, k1). `first`:
// start from zero, else from y. y: token j of panel q at y[j * ldy + q * 32].
template <DType kW, int P, int T>
PAGODA_AVX512 void FloatTile(const uint8_t* panel, int64_t panel_bytes, const float* x, int64_t n,
                             int64_t k0, int64_t k1, bool first, float* y, int64_t ldy,
                             bool prefetch) {
  __m512 acc[P][2][T];
  for (int q = 0; q < P; ++q)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j)
        acc[q][h][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + q * 32 + h * 16);
  constexpr int64_t kStep = 32 * kElem<kW>;  // bytes per k of one panel
  const uint8_t* wp[P];
  for (int q = 0; q < P; ++q) wp[q] = panel + q * panel_bytes + k0 * kStep;
  const float* xt[T];
  for (int j = 0; j < T; ++j) xt[j] = x + j * n;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k) {
    __m512 w[P][2];
    for (int q = 0; q < P; ++q) {
      if (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead), _MM_HINT_T0);
        if constexpr (kW == DType::kF32) {
          _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead + 64), _MM_HINT_T0);
        }
      }
      if constexpr (kW == DType::kF32) {
        w[q][0] = _mm512_load_ps(wp[q]);
        w[q][1] = _mm512_load_ps(wp[q] + 64);
      } else if constexpr (kW == DType::kF16) {
        w[q][0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wp[q])));
        w[q][1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wp[q] + 32)));
      } else {
        const __m512i v = _mm512_load_si512(wp[q]);
        w[q][0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        w[q][1] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
      }
      wp[q] += kStep;
    }
    for (int j = 0; j < T; ++j) {
      const __m512 xb = _mm512_set1_ps(xt[j][k]);
      for (int q = 0; q < P; ++q) {
        acc[q][0][j] = _mm512_fmadd_ps(w[q][0], xb, acc[q][0][j]);
        acc[q][1][j] = _mm512_fmadd_ps(w[q][1], xb, acc[q][1][j]);
      }
    }
  }
  for (int q = 0; q < P; ++q)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy + q * 32 + h * 16, acc[q][h][j]);
}

template <DType kW>
using FloatTileFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, int64_t, int64_t, bool,
                             float*, int64_t, bool);

template <DType kW, int... Ts>
constexpr FloatTileFn<kW> kFloatGemmTiles[] = {&FloatTile<kW, 1, Ts>...};

template <DType kW>
constexpr const FloatTileFn<kW>* FloatGemmTiles() {
  return kFloatGemmTiles<kW, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
}

template <DType kW>
PAGODA_AVX512 void FloatPanels(const PackedWeights& pw, const float* x, int64_t num_tokens,
                               int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  if (num_tokens == 1) {
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) {
      FloatTile<kW, 2, 1>(pw.panel(p), pw.panel_bytes, x, n, 0, n, true, y + (p - p0) * 32, ldy, true);
    }
    for (; p < p1; ++p) {
      FloatTile<kW, 1, 1>(pw.panel(p), pw.panel_bytes, x, n, 0, n, true, y + (p - p0) * 32, ldy, true);
    }
    return;
  }
  const FloatTileFn<kW>* tiles = FloatGemmTiles<kW>();
  const int64_t block = std::max<int64_t>(1, kL2WeightBudget / (32 * kFloatKc * kElem<kW>));
  for (int64_t rb = p0; rb < p1; rb += block) {
    const int64_t re = Min(rb + block, p1);
    for (int64_t k0 = 0; k0 < n; k0 += kFloatKc) {
      const int64_t k1 = Min(k0 + kFloatKc, n);
      for (int64_t t = 0; t < num_tokens; t += kFloatTokens) {
        const int64_t tt = Min(kFloatTokens, num_tokens - t);
        for (int64_t p = rb; p < re; ++p) {
          tiles[tt - 1](pw.panel(p), pw.panel_bytes, x + t * n, n, k0, k1, k0 == 0,
                        y + t * ldy + (p - p0) * 32, ldy, false);
        }
      }
    }
  }
}

// ---- q8 panels --------------------------------------------------------------------

constexpr int64_t kQ8BlocksPerSlice = 32;
constexpr int kQ8Tokens = 4;
constexpr int64_t kQ8BlockBytes = 8 * 16 * 4;  // codes of one block of a 16-row panel

// Panels [panel, panel + P) x tokens [t0, t0 + T), blocks [b0, b1). y as FloatTile (16 rows
// per panel).
template <int P, int T>
PAGODA_AVX512 void Q8Tile(const PackedWeights& pw, int64_t panel, const QuantizedActivations& xq,
                          int64_t t0, int64_t b0, int64_t b1, bool first, float* y, int64_t ldy,
                          bool prefetch) {
  __m512 acc[P][T];
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < T; ++j)
      acc[q][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + q * 16);
  const uint8_t* codes[P];
  const uint16_t* scales[P];
  for (int q = 0; q < P; ++q) {
    codes[q] = pw.panel(panel + q) + b0 * kQ8BlockBytes;
    scales[q] = pw.q8_scales(panel + q) + b0 * 16;
  }
  const int8_t* xc[T];
  const float* xd[T];
  const int32_t* xbias[T];
  for (int j = 0; j < T; ++j) {
    xc[j] = xq.q_row(t0 + j);
    xd[j] = xq.d_row(t0 + j);
    xbias[j] = xq.bias128_row(t0 + j);
  }
  for (int64_t b = b0; b < b1; ++b) {
    __m512i isum[P][T];
    for (int j = 0; j < T; ++j) {
      const __m512i bias = _mm512_set1_epi32(xbias[j][b]);
      for (int q = 0; q < P; ++q) isum[q][j] = bias;
    }
    for (int quad = 0; quad < 8; ++quad) {
      __m512i wv[P];
      for (int q = 0; q < P; ++q) {
        if (prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(codes[q] + quad * 64 + kPrefetchAhead), _MM_HINT_T0);
        }
        wv[q] = _mm512_load_si512(codes[q] + quad * 64);
      }
      for (int j = 0; j < T; ++j) {
        int32_t x4;
        std::memcpy(&x4, xc[j] + b * 32 + quad * 4, 4);
        const __m512i xv = _mm512_set1_epi32(x4);
        for (int q = 0; q < P; ++q) isum[q][j] = _mm512_dpbusd_epi32(isum[q][j], wv[q], xv);
      }
    }
    __m512 dw[P];
    for (int q = 0; q < P; ++q) {
      if (prefetch && (b & 1) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(scales[q] + 16 * 16), _MM_HINT_T0);
      }
      dw[q] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[q])));
      codes[q] += kQ8BlockBytes;
      scales[q] += 16;
    }
    for (int j = 0; j < T; ++j) {
      const __m512 dx = _mm512_set1_ps(xd[j][b]);
      for (int q = 0; q < P; ++q) {
        acc[q][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[q][j]), _mm512_mul_ps(dw[q], dx), acc[q][j]);
      }
    }
  }
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy + q * 16, acc[q][j]);
}

using Q8TileFn = void (*)(const PackedWeights&, int64_t, const QuantizedActivations&, int64_t, int64_t,
                          int64_t, bool, float*, int64_t, bool);
constexpr Q8TileFn kQ8Pair[kQ8Tokens] = {&Q8Tile<2, 1>, &Q8Tile<2, 2>, &Q8Tile<2, 3>, &Q8Tile<2, 4>};
constexpr Q8TileFn kQ8Single[kQ8Tokens] = {&Q8Tile<1, 1>, &Q8Tile<1, 2>, &Q8Tile<1, 3>, &Q8Tile<1, 4>};

PAGODA_AVX512 void Q8Panels(const PackedWeights& pw, const QuantizedActivations& xq,
                            int64_t num_tokens, int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t nb = pw.num_blocks();
  if (num_tokens == 1) {
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) Q8Tile<2, 1>(pw, p, xq, 0, 0, nb, true, y + (p - p0) * 16, ldy, true);
    for (; p < p1; ++p) Q8Tile<1, 1>(pw, p, xq, 0, 0, nb, true, y + (p - p0) * 16, ldy, true);
    return;
  }
  const int64_t block = std::max<int64_t>(2, kL2WeightBudget / (kQ8BlocksPerSlice * (kQ8BlockBytes + 32)));
  for (int64_t rb = p0; rb < p1; rb += block) {
    const int64_t re = Min(rb + block, p1);
    for (int64_t b0 = 0; b0 < nb; b0 += kQ8BlocksPerSlice) {
      const int64_t b1 = Min(b0 + kQ8BlocksPerSlice, nb);
      for (int64_t t = 0; t < num_tokens; t += kQ8Tokens) {
        const int64_t tt = Min(kQ8Tokens, num_tokens - t);
        int64_t p = rb;
        for (; p + 2 <= re; p += 2) {
          kQ8Pair[tt - 1](pw, p, xq, t, b0, b1, b0 == 0, y + t * ldy + (p - p0) * 16, ldy, false);
        }
        for (; p < re; ++p) {
          kQ8Single[tt - 1](pw, p, xq, t, b0, b1, b0 == 0, y + t * ldy + (p - p0) * 16, ldy, false);
        }
      }
    }
  }
}

}  // namespace

void PackedRowsAvx512(const PackedWeights& pw, const float* x, const QuantizedActivations* xq,
                      int64_t num_tokens, int64_t p0, int64_t p1, float* y, int64_t ldy) {
  if (pw.format == PackedWeights::Format::kQ8) {
    Q8Panels(pw, *xq, num_tokens, p0, p1, y, ldy);
    return;
  }
  switch (pw.dtype) {
    case DType::kF32: FloatPanels<DType::kF32>(pw, x, num_tokens, p0, p1, y, ldy); return;
    case DType::kF16: FloatPanels<DType::kF16>(pw, x, num_tokens, p0, p1, y, ldy); return;
    default: FloatPanels<DType::kBF16>(pw, x, num_tokens, p0, p1, y, ldy); return;
  }
}

}  // namespace pagoda::matmul_internal
