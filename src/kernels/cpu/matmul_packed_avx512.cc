// AVX-512 (+ VNNI) kernels for packed weights (packed_weights.h): rows in lanes, so an
// activation is broadcast and every FMA / vpdpbusd works on 16 rows at once with no
// horizontal sums.
//
//   Float panels (32 rows; F32, F16, BF16): per k one panel step gives two vectors of 16
//   rows (BF16: one 64-byte load, a shift and an AND); a GEMM tile is 1 panel x 12 tokens
//   = 24 accumulators, a GEMV tile 2 panels x 1 token.
//   Q8 panels (16 rows): per 32-block and token, 8 vpdpbusd (4 k of 16 rows each) into an
//   integer sum that starts at -128 * sum(x codes), then acc += float(isum) * (dw * dx);
//   GEMM tile 2 panels x 6 tokens, GEMV tile 2 panels x 1 token. Q4 panels (Q4_0) run the
//   same tiles: per block 4 loads of nibbles, each split (AND, shift+AND) into the codes
//   of 4 low and 4 high k, the sum starting at -8 * sum(x codes).
// GEMM walks k in slices (float: 256 k, q8: 32 blocks) chained through y, rows in blocks
// that stay in L2 and token tiles that stay in L1; GEMV streams each panel once with a
// software prefetch ahead (panels are contiguous, so it runs into the next panel).
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

// Bytes ahead of the current weight the GEMV prefetches (within and across panels).
// PAGODA_GEMV_PREFETCH=bytes overrides it (tuning).
const int64_t kPrefetchAhead = [] {
  const char* v = std::getenv("PAGODA_GEMV_PREFETCH");
  const long b = v != nullptr ? std::atol(v) : 0;
  return b >= 64 && b <= (1 << 20) ? static_cast<int64_t>(b) / 64 * 64 : int64_t{4096};
}();
// Panels one GEMV tile streams at once (1 or 2; PAGODA_GEMV_PANELS overrides, tuning).
const int kGemvPanels = [] {
  const char* v = std::getenv("PAGODA_GEMV_PANELS");
  return v != nullptr && v[0] == '1' ? 1 : 2;
}();
constexpr int64_t kL2WeightBudget = 256 * 1024;

// ---- float panels -------------------------------------------------------------

constexpr int64_t kFloatKc = 256;
constexpr int kFloatTokens = 12;

template <DType kW>
constexpr int64_t kElem = kW == DType::kF32 ? 4 : 2;

// One k of one panel as two vectors of f32 rows (rows 0-15, then the rest), widened exactly.
template <DType kW>
PAGODA_AVX512_INLINE void LoadPanelStep(const uint8_t* wp, __m512 (&w)[2], __m512i high) {
  if constexpr (kW == DType::kF32) {
    w[0] = _mm512_load_ps(wp);
    w[1] = _mm512_load_ps(wp + 64);
  } else if constexpr (kW == DType::kF16) {
    w[0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wp)));
    w[1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wp + 32)));
  } else {
    const __m512i v = _mm512_load_si512(wp);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
  }
}

// Panels [panel, panel + P) x T tokens whose activations are packed k-major for this
// k-slice: xp[(k - k0) * T + j] (one pointer, constant offsets, no cache set conflicts
// between token rows; for one token that is x itself from k0). `first`: start from zero,
// else from y. y: token j of panel q at y[j * ldy + q * panel rows]. kPrefetch (GEMV,
// streaming): prefetch each panel kPrefetchAhead bytes ahead.
template <DType kW, int P, int T, bool kPrefetch = false>
PAGODA_AVX512 void FloatGemmTile(const uint8_t* panel, int64_t panel_bytes, const float* xp,
                                 int64_t k0, int64_t k1, bool first, float* y, int64_t ldy) {
  __m512 acc[P][2][T];
  for (int q = 0; q < P; ++q)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < T; ++j)
        acc[q][h][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + q * 32 + h * 16);
  constexpr int64_t kStep = 32 * kElem<kW>;
  const uint8_t* wp[P];
  for (int q = 0; q < P; ++q) wp[q] = panel + q * panel_bytes + k0 * kStep;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k, xp += T) {
    __m512 w[P][2];
    for (int q = 0; q < P; ++q) {
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead), _MM_HINT_T0);
        if constexpr (kW == DType::kF32) {
          _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead + 64), _MM_HINT_T0);
        }
      }
      LoadPanelStep<kW>(wp[q], w[q], high);
      wp[q] += kStep;
    }
    for (int j = 0; j < T; ++j) {
      const __m512 xb = _mm512_set1_ps(xp[j]);
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
using FloatGemmFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, int64_t, bool, float*,
                             int64_t);

// Tile tables: [T - 1] for T = 1 .. max tokens of the shape.
template <DType kW, int P, int... Ts>
constexpr FloatGemmFn<kW> kFloatGemm[] = {&FloatGemmTile<kW, P, Ts>...};

// GEMM register-tile shape (panels x tokens), chosen once. PAGODA_GEMM_TILE_F=1x12|2x6|1x8
// overrides it (for tuning on a new CPU).
struct TileShape {
  int panels, tokens;
};
TileShape ParseShape(const char* env, TileShape def) {
  const char* v = std::getenv(env);
  if (v == nullptr) return def;
  int a = 0, b = 0;
  if (std::sscanf(v, "%dx%d", &a, &b) != 2) return def;
  return {a, b};
}
TileShape FloatShape() {
  static const TileShape s = [] {
    TileShape t = ParseShape("PAGODA_GEMM_TILE_F", {1, 12});
    if (!((t.panels == 1 && (t.tokens == 12 || t.tokens == 8)) || (t.panels == 2 && t.tokens == 6))) t = {1, 12};
    return t;
  }();
  return s;
}

template <DType kW>
const FloatGemmFn<kW>* FloatGemmTable(TileShape shape) {
  if (shape.panels == 2) return kFloatGemm<kW, 2, 1, 2, 3, 4, 5, 6>;
  if (shape.tokens == 8) return kFloatGemm<kW, 1, 1, 2, 3, 4, 5, 6, 7, 8>;
  return kFloatGemm<kW, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
}

// Packs the activations of k-slice [k0, k1) for every token tile: tile i at
// xp + i * kFloatKc * tokens_per_tile, [k - k0][tt] within it.
PAGODA_AVX512 void PackActivationSlice(const float* x, int64_t n, int64_t num_tokens, int64_t k0,
                                       int64_t k1, int64_t tokens_per_tile, float* xp) {
  for (int64_t t = 0, i = 0; t < num_tokens; t += tokens_per_tile, ++i) {
    const int64_t tt = Min(tokens_per_tile, num_tokens - t);
    float* dst = xp + i * kFloatKc * tokens_per_tile;
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t j = 0; j < tt; ++j) dst[(k - k0) * tt + j] = x[(t + j) * n + k];
  }
}

// BF16/F16 GEMM: each row block's k-slice is widened to f32 once (exactly, rows in natural
// order) and then run through the F32 tiles, so the conversion is paid once per slice instead
// of once per token tile. The FMAs are the same as FloatGemmTile<kW>'s: same bits.
// PAGODA_GEMM_WIDEN=0 runs the converting tiles instead.
bool WidenSlices() {
  static const bool on = [] {
    const char* v = std::getenv("PAGODA_GEMM_WIDEN");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

template <DType kW>
PAGODA_AVX512 void WidenSlice(const uint8_t* panel, int64_t k0, int64_t k1, float* dst) {
  constexpr int64_t kStep = 32 * kElem<kW>;
  const uint8_t* wp = panel + k0 * kStep;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k, wp += kStep, dst += 32) {
    __m512 w[2];
    LoadPanelStep<kW>(wp, w, high);
    _mm512_store_ps(dst, w[0]);
    _mm512_store_ps(dst + 16, w[1]);
  }
}

template <DType kW>
PAGODA_AVX512 void FloatPanelsWidened(const PackedWeights& pw, const float* x, int64_t num_tokens,
                                      int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  const TileShape shape = FloatShape();
  const FloatGemmFn<DType::kF32>* tiles = FloatGemmTable<DType::kF32>(shape);
  const FloatGemmFn<DType::kF32>* single = kFloatGemm<DType::kF32, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
  const int64_t block = std::max<int64_t>(2, 2 * kL2WeightBudget / (32 * kFloatKc * 4));
  const int64_t tokens_per_tile = shape.tokens;
  const int64_t num_tiles = (num_tokens + tokens_per_tile - 1) / tokens_per_tile;
  float* const xp = ThreadScratch(0, num_tiles * kFloatKc * tokens_per_tile);
  constexpr int64_t kSliceBytes = kFloatKc * 32 * 4;
  float* const wide = ThreadScratch(1, Min(block, p1 - p0) * kFloatKc * 32);
  for (int64_t k0 = 0; k0 < n; k0 += kFloatKc) {
    const int64_t k1 = Min(k0 + kFloatKc, n);
    PackActivationSlice(x, n, num_tokens, k0, k1, tokens_per_tile, xp);
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = Min(rb + block, p1);
      for (int64_t p = rb; p < re; ++p) WidenSlice<kW>(pw.panel(p), k0, k1, wide + (p - rb) * kFloatKc * 32);
      const uint8_t* base = reinterpret_cast<const uint8_t*>(wide);
      for (int64_t i = 0; i < num_tiles; ++i) {
        const int64_t t = i * tokens_per_tile, tt = Min(tokens_per_tile, num_tokens - t);
        const float* xt = xp + i * kFloatKc * tokens_per_tile;
        int64_t p = rb;
        for (; p + shape.panels <= re; p += shape.panels) {
          tiles[tt - 1](base + (p - rb) * kSliceBytes, kSliceBytes, xt, 0, k1 - k0, k0 == 0,
                        y + t * ldy + (p - p0) * 32, ldy);
        }
        for (; p < re; ++p) {
          single[tt - 1](base + (p - rb) * kSliceBytes, kSliceBytes, xt, 0, k1 - k0, k0 == 0,
                         y + t * ldy + (p - p0) * 32, ldy);
        }
      }
    }
  }
}

template <DType kW>
PAGODA_AVX512 void FloatPanels(const PackedWeights& pw, const float* x, int64_t num_tokens,
                               int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  if (num_tokens == 1) {
    int64_t p = p0;
    for (; kGemvPanels == 2 && p + 2 <= p1; p += 2) {
      FloatGemmTile<kW, 2, 1, true>(pw.panel(p), pw.panel_bytes, x, 0, n, true, y + (p - p0) * 32, ldy);
    }
    for (; p < p1; ++p) {
      FloatGemmTile<kW, 1, 1, true>(pw.panel(p), pw.panel_bytes, x, 0, n, true, y + (p - p0) * 32, ldy);
    }
    return;
  }
  if constexpr (kW != DType::kF32) {
    if (WidenSlices()) {
      FloatPanelsWidened<kW>(pw, x, num_tokens, p0, p1, y, ldy);
      return;
    }
  }
  const TileShape shape = FloatShape();
  const FloatGemmFn<kW>* tiles = FloatGemmTable<kW>(shape);
  const FloatGemmFn<kW>* single = kFloatGemm<kW, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
  const int64_t block = std::max<int64_t>(2, kL2WeightBudget / (32 * kFloatKc * kElem<kW>));
  const int64_t tokens_per_tile = shape.tokens;
  // All token tiles of one k-slice, packed k-major per tile: tile i at xp + i * kFloatKc * T.
  const int64_t num_tiles = (num_tokens + tokens_per_tile - 1) / tokens_per_tile;
  float* const xp = ThreadScratch(0, num_tiles * kFloatKc * tokens_per_tile);
  for (int64_t k0 = 0; k0 < n; k0 += kFloatKc) {
    const int64_t k1 = Min(k0 + kFloatKc, n);
    PackActivationSlice(x, n, num_tokens, k0, k1, tokens_per_tile, xp);
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = Min(rb + block, p1);
      for (int64_t i = 0; i < num_tiles; ++i) {
        const int64_t t = i * tokens_per_tile, tt = Min(tokens_per_tile, num_tokens - t);
        const float* xt = xp + i * kFloatKc * tokens_per_tile;
        int64_t p = rb;
        for (; p + shape.panels <= re; p += shape.panels) {
          tiles[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + t * ldy + (p - p0) * 32, ldy);
        }
        for (; p < re; ++p) {
          single[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + t * ldy + (p - p0) * 32, ldy);
        }
      }
    }
  }
}

// ---- q8 / q4 panels -----------------------------------------------------------------

constexpr int64_t kQ8BlocksPerSlice = 32;
// Code bytes of one block of a 16-row panel: Q8 8 quads of 64 bytes, Q4 4 quads of nibbles.
template <bool kQ4>
constexpr int64_t kCodeBytes = kQ4 ? 4 * 64 : 8 * 64;

// isum[q][j] += the block's integer dot for panels q and tokens j; x4(quad, j) gives the
// 4 activation codes of quad (k / 4) 0..7 of token j. Integer sums are exact, so the
// order of the vpdpbusd does not matter.
template <bool kQ4, int P, int T, typename X4>
PAGODA_AVX512_INLINE void BlockDot(const uint8_t* const* codes, X4&& x4, __m512i (&isum)[P][T],
                                   bool prefetch) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  constexpr int kLoads = kQ4 ? 4 : 8;
  for (int u = 0; u < kLoads; ++u) {
    __m512i wv[P], hv[P];
    for (int q = 0; q < P; ++q) {
      if (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(codes[q] + u * 64 + kPrefetchAhead), _MM_HINT_T0);
      }
      const __m512i v = _mm512_load_si512(codes[q] + u * 64);
      if constexpr (kQ4) {
        wv[q] = _mm512_and_si512(v, low);                          // k = 4u .. 4u+3
        hv[q] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);   // k = 16+4u .. 16+4u+3
      } else {
        wv[q] = v;
      }
    }
    for (int j = 0; j < T; ++j) {
      const __m512i xv = _mm512_set1_epi32(x4(u, j));
      for (int q = 0; q < P; ++q) isum[q][j] = _mm512_dpbusd_epi32(isum[q][j], wv[q], xv);
      if constexpr (kQ4) {
        const __m512i xh = _mm512_set1_epi32(x4(4 + u, j));
        for (int q = 0; q < P; ++q) isum[q][j] = _mm512_dpbusd_epi32(isum[q][j], hv[q], xh);
      }
    }
  }
}

// Panels [panel, panel + P) x tokens [t0, t0 + T), blocks [b0, b1). y as FloatTile (16 rows
// per panel).
template <bool kQ4, int P, int T>
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
    codes[q] = pw.panel(panel + q) + b0 * kCodeBytes<kQ4>;
    scales[q] = pw.q_scales(panel + q) + b0 * 16;
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
      // Q4: nibble codes n = w + 8, so the correction is -8 * sum(x) = bias128 / 16.
      const __m512i bias = _mm512_set1_epi32(kQ4 ? xbias[j][b] / 16 : xbias[j][b]);
      for (int q = 0; q < P; ++q) isum[q][j] = bias;
    }
    BlockDot<kQ4, P, T>(codes, [&](int quad, int j) {
      int32_t x4;
      std::memcpy(&x4, xc[j] + b * 32 + quad * 4, 4);
      return x4;
    }, isum, prefetch);
    __m512 dw[P];
    for (int q = 0; q < P; ++q) {
      if (prefetch && (b & 1) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(scales[q] + 16 * 16), _MM_HINT_T0);
      }
      dw[q] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[q])));
      codes[q] += kCodeBytes<kQ4>;
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

// GEMM tile over activations packed per block-slice and token tile (QPack): 4 codes
// of token j at quad (b, quad) in x4[((b - b0) * 8 + quad) * T + j], its block bias
// and scale in bias[(b - b0) * T + j], dx[...]. Same per-output order as Q8Tile.
struct QPack {
  const int32_t* x4;
  const int32_t* bias;
  const float* dx;
};

template <bool kQ4, int P, int T>
PAGODA_AVX512 void Q8GemmTile(const PackedWeights& pw, int64_t panel, QPack xp, int64_t b0,
                              int64_t b1, bool first, float* y, int64_t ldy) {
  __m512 acc[P][T];
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < T; ++j)
      acc[q][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + q * 16);
  const uint8_t* codes[P];
  const uint16_t* scales[P];
  for (int q = 0; q < P; ++q) {
    codes[q] = pw.panel(panel + q) + b0 * kCodeBytes<kQ4>;
    scales[q] = pw.q_scales(panel + q) + b0 * 16;
  }
  for (int64_t b = b0; b < b1; ++b) {
    __m512i isum[P][T];
    for (int j = 0; j < T; ++j)
      for (int q = 0; q < P; ++q) isum[q][j] = _mm512_set1_epi32(xp.bias[j]);
    BlockDot<kQ4, P, T>(codes, [&](int quad, int j) { return xp.x4[quad * T + j]; }, isum, false);
    __m512 dw[P];
    for (int q = 0; q < P; ++q) {
      dw[q] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[q])));
      codes[q] += kCodeBytes<kQ4>;
      scales[q] += 16;
    }
    for (int j = 0; j < T; ++j) {
      const __m512 dx = _mm512_set1_ps(xp.dx[j]);
      for (int q = 0; q < P; ++q) {
        acc[q][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[q][j]), _mm512_mul_ps(dw[q], dx), acc[q][j]);
      }
    }
    xp.x4 += 8 * T;
    xp.bias += T;
    xp.dx += T;
  }
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy + q * 16, acc[q][j]);
}

using Q8GemmFn = void (*)(const PackedWeights&, int64_t, QPack, int64_t, int64_t, bool, float*, int64_t);
template <bool kQ4, int P, int... Ts>
constexpr Q8GemmFn kQ8Gemm[] = {&Q8GemmTile<kQ4, P, Ts>...};

// PAGODA_GEMM_TILE_Q8=2x6|2x4|1x8|4x2 overrides the default shape (2x6: fastest on
// the Sapphire Rapids-class host, docs/benchmarks.md).
TileShape Q8Shape() {
  static const TileShape s = [] {
    TileShape t = ParseShape("PAGODA_GEMM_TILE_Q8", {2, 6});
    const bool ok = (t.panels == 2 && (t.tokens == 4 || t.tokens == 6)) || (t.panels == 1 && t.tokens == 8) ||
                    (t.panels == 4 && t.tokens == 2);
    return ok ? t : TileShape{2, 6};
  }();
  return s;
}

template <bool kQ4>
const Q8GemmFn* Q8GemmTable(TileShape shape) {
  if (shape.panels == 1) return kQ8Gemm<kQ4, 1, 1, 2, 3, 4, 5, 6, 7, 8>;
  if (shape.panels == 4) return kQ8Gemm<kQ4, 4, 1, 2>;
  if (shape.tokens == 6) return kQ8Gemm<kQ4, 2, 1, 2, 3, 4, 5, 6>;
  return kQ8Gemm<kQ4, 2, 1, 2, 3, 4>;
}

template <bool kQ4>
PAGODA_AVX512 void Q8Panels(const PackedWeights& pw, const QuantizedActivations& xq,
                            int64_t num_tokens, int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t nb = pw.num_blocks();
  if (num_tokens == 1) {
    int64_t p = p0;
    for (; kGemvPanels == 2 && p + 2 <= p1; p += 2) Q8Tile<kQ4, 2, 1>(pw, p, xq, 0, 0, nb, true, y + (p - p0) * 16, ldy, true);
    for (; p < p1; ++p) Q8Tile<kQ4, 1, 1>(pw, p, xq, 0, 0, nb, true, y + (p - p0) * 16, ldy, true);
    return;
  }
  const TileShape shape = Q8Shape();
  const Q8GemmFn* tiles = Q8GemmTable<kQ4>(shape);
  const Q8GemmFn* single = kQ8Gemm<kQ4, 1, 1, 2, 3, 4, 5, 6, 7, 8>;
  const int64_t tp = shape.tokens;
  const int64_t num_tiles = (num_tokens + tp - 1) / tp;
  const int64_t slice = kQ8BlocksPerSlice;
  // Packed activations of one slice, kept per thread between calls.
  int32_t* const x4 = reinterpret_cast<int32_t*>(ThreadScratch(0, num_tiles * slice * 8 * tp));
  int32_t* const bias = reinterpret_cast<int32_t*>(ThreadScratch(1, num_tiles * slice * tp));
  float* const dx = ThreadScratch(2, num_tiles * slice * tp);
  const int64_t block = std::max<int64_t>(2, kL2WeightBudget / (slice * (kCodeBytes<kQ4> + 32)));
  for (int64_t b0 = 0; b0 < nb; b0 += slice) {
    const int64_t b1 = Min(b0 + slice, nb);
    for (int64_t i = 0; i < num_tiles; ++i) {  // pack this slice's activations
      const int64_t t = i * tp, tt = Min(tp, num_tokens - t);
      int32_t* x4t = x4 + i * slice * 8 * tp;
      int32_t* bt = bias + i * slice * tp;
      float* dt = dx + i * slice * tp;
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t j = 0; j < tt; ++j) {
          for (int quad = 0; quad < 8; ++quad) {
            std::memcpy(x4t + ((b - b0) * 8 + quad) * tt + j, xq.q_row(t + j) + b * 32 + quad * 4, 4);
          }
          const int32_t bias = xq.bias128_row(t + j)[b];
          bt[(b - b0) * tt + j] = kQ4 ? bias / 16 : bias;
          dt[(b - b0) * tt + j] = xq.d_row(t + j)[b];
        }
      }
    }
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = Min(rb + block, p1);
      for (int64_t i = 0; i < num_tiles; ++i) {
        const int64_t t = i * tp, tt = Min(tp, num_tokens - t);
        const QPack xpk{x4 + i * slice * 8 * tp, bias + i * slice * tp, dx + i * slice * tp};
        int64_t p = rb;
        for (; p + shape.panels <= re; p += shape.panels) {
          tiles[tt - 1](pw, p, xpk, b0, b1, b0 == 0, y + t * ldy + (p - p0) * 16, ldy);
        }
        for (; p < re; ++p) single[tt - 1](pw, p, xpk, b0, b1, b0 == 0, y + t * ldy + (p - p0) * 16, ldy);
      }
    }
  }
}

}  // namespace

void PackedRowsAvx512(const PackedWeights& pw, const float* x, const QuantizedActivations* xq,
                      int64_t num_tokens, int64_t p0, int64_t p1, float* y, int64_t ldy) {
  if (pw.format == PackedWeights::Format::kQ8) {
    Q8Panels<false>(pw, *xq, num_tokens, p0, p1, y, ldy);
    return;
  }
  if (pw.format == PackedWeights::Format::kQ4) {
    Q8Panels<true>(pw, *xq, num_tokens, p0, p1, y, ldy);
    return;
  }
  switch (pw.dtype) {
    case DType::kF32: FloatPanels<DType::kF32>(pw, x, num_tokens, p0, p1, y, ldy); return;
    case DType::kF16: FloatPanels<DType::kF16>(pw, x, num_tokens, p0, p1, y, ldy); return;
    default: FloatPanels<DType::kBF16>(pw, x, num_tokens, p0, p1, y, ldy); return;
  }
}

}  // namespace pagoda::matmul_internal
