// AVX-512 (+ VNNI) kernels for packed weights (packed_weights.h): rows in lanes, so an
// activation is broadcast and every FMA / vpdpbusd works on 16 rows at once with no
// horizontal sums.
//
//   Float panels (32 rows; F32, F16, BF16): per k one panel step gives two vectors of 16
//   rows (BF16: one 64-byte load, a shift and an AND); a GEMM tile is 1 panel x 12 tokens
//   = 24 accumulators, a GEMV tile 1 panel x 1 token.
//   Q8 panels (32 rows, blocks one after the other: one stream per panel): per 32-block, row
//   group of 16 and token, 8 vpdpbusd (4 k of 16 rows each) into an integer sum that starts at
//   -128 * sum(x codes), then acc += float(isum) * (dw * dx); GEMM tile 1 panel x 6 tokens,
//   GEMV tile 1 panel x 1 token. Q4 panels (Q4_0) run the same tiles: per block 4 loads of
//   nibbles, each split (AND, shift+AND) into the codes of 4 low and 4 high k, the sum
//   starting at -8 * sum(x codes).
// GEMM walks k in slices (float: 256 k, q8: 32 blocks) chained through y, rows in blocks
// that stay in L2 and the token tiles the caller packed once for all threads (PackedInputs);
// GEMV streams each panel once with a software prefetch 8 KiB ahead into L2 (panels are
// contiguous, so it runs into the next panel).
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

// Bytes ahead of the current weight the GEMV prefetches into L2 (within and across panels):
// 8 KiB into L2 streamed 5-10% faster than 4 KiB into L1 on the Sapphire Rapids-class host
// (docs/benchmarks.md). PAGODA_GEMV_PREFETCH=bytes overrides it (tuning).
const int64_t kPrefetchAhead = [] {
  const char* v = std::getenv("PAGODA_GEMV_PREFETCH");
  const long b = v != nullptr ? std::atol(v) : 0;
  return b >= 64 && b <= (1 << 20) ? static_cast<int64_t>(b) / 64 * 64 : int64_t{8192};
}();
// And a second prefetch of the same streams kL1Ahead bytes ahead into L1 (0: none; the L2
// prefetch alone left the L2 -> L1 hop to the hardware): llama-1b decode on the 2026-12-02
// host, 512-token context, A/B: bf16 91.5 / 92.2 / 93.8% -> 95.9 / 96.7 / 97.5% of the read
// bound (1 KiB; 2 KiB the same), q8_0 93.4 / 96.7% -> 96.8 / 97.3% (2 KiB).
// PAGODA_GEMV_L1_PREFETCH=bytes overrides it (tuning).
const int64_t kL1Ahead = [] {
  const char* v = std::getenv("PAGODA_GEMV_L1_PREFETCH");
  const long b = v != nullptr ? std::atol(v) : 2048;
  return b >= 0 && b <= (1 << 20) ? static_cast<int64_t>(b) / 64 * 64 : int64_t{2048};
}();
// Panels one float GEMV tile streams at once: 1 (one stream per thread read 2-6% faster than
// 2 in bf16 llama-1b decodes on the 2026-12-01 host, docs/benchmarks.md); PAGODA_GEMV_PANELS=2
// streams two (tuning).
const int kGemvPanels = [] {
  const char* v = std::getenv("PAGODA_GEMV_PANELS");
  return v != nullptr && v[0] == '2' ? 2 : 1;
}();
constexpr int64_t kL2WeightBudget = 256 * 1024;

// Inline-asm pieces shared by the written-out GEMM tiles below: the 32 outputs of one token
// (at address `at`, e.g. "(%[y],%[ldy4],2)") to or from the registers r0 (rows 0-15) and r1
// (rows 16-31).
#define PAGODA_ASM_LOAD_ROWS(at, r0, r1) "vmovups " at ", %%zmm" #r0 "\n\t" "vmovups 64" at ", %%zmm" #r1 "\n\t"
#define PAGODA_ASM_STORE_ROWS(at, r0, r1) "vmovups %%zmm" #r0 ", " at "\n\t" "vmovups %%zmm" #r1 ", 64" at "\n\t"

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

// FloatGemmTile12: the f32 tile of 1 panel x 12 tokens (F32 weights and the widened BF16/F16
// slices: a prefill's float GEMM time) over nk steps of k, as FloatGemmTile<kF32, 1, 12>
// computes it, with the registers written out: sums of rows 0-15 in zmm0-11, rows 16-31 in
// zmm12-23 (token j in zmm j / zmm 12+j), the k step's weights in zmm24-25, and each FMA
// reading its token's activation as an embedded broadcast: 26 uops per 24 FMAs instead of 38
// (a separate broadcast per token), which counts when the sibling hyperthread takes issue
// slots. Same FMAs in the same order: same bits.
PAGODA_AVX512 void FloatGemmTile12(const uint8_t* w, const float* xp, int64_t nk, bool first, float* y,
                                   int64_t ldy) {
  float* const y3 = y + 3 * ldy;  // token j at y + j * ldy: 0-2 from y, 3-5 y3, 6-8 y6, 9-11 y9
  float* const y6 = y + 6 * ldy;
  float* const y9 = y + 9 * ldy;
  const int64_t ldy4 = ldy * 4;
  // X(address of token j's 32 outputs, j, register of rows 0-15, register of rows 16-31)
#define PAGODA_F12_TOKENS(X)                                                                       \
  X("(%[y])", 0, 12) X("(%[y],%[ldy4],1)", 1, 13) X("(%[y],%[ldy4],2)", 2, 14)                     \
  X("(%[y3])", 3, 15) X("(%[y3],%[ldy4],1)", 4, 16) X("(%[y3],%[ldy4],2)", 5, 17)                  \
  X("(%[y6])", 6, 18) X("(%[y6],%[ldy4],1)", 7, 19) X("(%[y6],%[ldy4],2)", 8, 20)                  \
  X("(%[y9])", 9, 21) X("(%[y9],%[ldy4],1)", 10, 22) X("(%[y9],%[ldy4],2)", 11, 23)
#define PAGODA_F12_ZERO(at, r0, r1) "vpxord %%zmm" #r0 ", %%zmm" #r0 ", %%zmm" #r0 "\n\t" \
  "vpxord %%zmm" #r1 ", %%zmm" #r1 ", %%zmm" #r1 "\n\t"
#define PAGODA_F12_FMA(at, r0, r1)                               \
  "vfmadd231ps 4*" #r0 "(%[xp])%{1to16%}, %%zmm24, %%zmm" #r0 "\n\t" \
  "vfmadd231ps 4*" #r0 "(%[xp])%{1to16%}, %%zmm25, %%zmm" #r1 "\n\t"
  __asm__ volatile(
      "test %[first], %[first]\n\t"
      "jz 2f\n\t"
      PAGODA_F12_TOKENS(PAGODA_F12_ZERO)
      "jmp 1f\n\t"
      "2:\n\t"
      PAGODA_F12_TOKENS(PAGODA_ASM_LOAD_ROWS)
      "1:\n\t"
      "vmovaps (%[w]), %%zmm24\n\t"
      "vmovaps 64(%[w]), %%zmm25\n\t"
      PAGODA_F12_TOKENS(PAGODA_F12_FMA)
      "add $128, %[w]\n\t"
      "add $48, %[xp]\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      PAGODA_F12_TOKENS(PAGODA_ASM_STORE_ROWS)
      : [w] "+r"(w), [xp] "+r"(xp), [n] "+r"(nk)
      : [y] "r"(y), [y3] "r"(y3), [y6] "r"(y6), [y9] "r"(y9), [ldy4] "r"(ldy4),
        [first] "r"(static_cast<int64_t>(first))
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
        "xmm23", "xmm24", "xmm25", "cc", "memory");
#undef PAGODA_F12_TOKENS
#undef PAGODA_F12_ZERO
#undef PAGODA_F12_FMA
}

// Panels [panel, panel + P) x T tokens whose activations are packed k-major for this
// k-slice: xp[(k - k0) * T + j] (one pointer, constant offsets, no cache set conflicts
// between token rows; for one token that is x itself from k0). `first`: start from zero,
// else from y. y: token j of panel q at y[j * ldy + q * panel rows]. kPrefetch (GEMV,
// streaming): prefetch each panel kPrefetchAhead bytes ahead.
template <DType kW, int P, int T, bool kPrefetch = false>
PAGODA_AVX512 void FloatGemmTile(const uint8_t* panel, int64_t panel_bytes, const float* xp,
                                 int64_t k0, int64_t k1, bool first, float* y, int64_t ldy) {
  if constexpr (kW == DType::kF32 && P == 1 && T == 12 && !kPrefetch) {
    if (k1 > k0) {
      FloatGemmTile12(panel + k0 * 128, xp, k1 - k0, first, y, ldy);
      return;
    }
  }
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
        _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead), _MM_HINT_T1);
        if (kL1Ahead > 0) _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kL1Ahead), _MM_HINT_T0);
        if constexpr (kW == DType::kF32) {
          _mm_prefetch(reinterpret_cast<const char*>(wp[q] + kPrefetchAhead + 64), _MM_HINT_T1);
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
PAGODA_AVX512 void FloatPanelsWidened(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1,
                                      int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  const TileShape shape = FloatShape();
  const FloatGemmFn<DType::kF32>* tiles = FloatGemmTable<DType::kF32>(shape);
  const FloatGemmFn<DType::kF32>* single = kFloatGemm<DType::kF32, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
  const int64_t block = std::max<int64_t>(2, 2 * kL2WeightBudget / (32 * kFloatKc * 4));
  const int64_t T = in.tile_tokens;
  constexpr int64_t kSliceBytes = kFloatKc * 32 * 4;
  float* const wide = ThreadScratch(1, Min(block, p1 - p0) * kFloatKc * 32);
  for (int64_t k0 = 0; k0 < n; k0 += kFloatKc) {
    const int64_t k1 = Min(k0 + kFloatKc, n);
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = Min(rb + block, p1);
      for (int64_t p = rb; p < re; ++p) WidenSlice<kW>(pw.panel(p), k0, k1, wide + (p - rb) * kFloatKc * 32);
      const uint8_t* base = reinterpret_cast<const uint8_t*>(wide);
      for (int64_t t = t0; t < t1; t += T) {
        const int64_t tt = Min(T, t1 - t);
        const float* xt = in.x_tiles + (t / T) * n * T + k0 * tt;
        int64_t p = rb;
        for (; p + shape.panels <= re; p += shape.panels) {
          tiles[tt - 1](base + (p - rb) * kSliceBytes, kSliceBytes, xt, 0, k1 - k0, k0 == 0,
                        y + (t - t0) * ldy + (p - p0) * 32, ldy);
        }
        for (; p < re; ++p) {
          single[tt - 1](base + (p - rb) * kSliceBytes, kSliceBytes, xt, 0, k1 - k0, k0 == 0,
                         y + (t - t0) * ldy + (p - p0) * 32, ldy);
        }
      }
    }
  }
}

template <DType kW>
PAGODA_AVX512 void FloatPanels(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1,
                               int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t n = pw.cols;
  if (t1 - t0 == 1) {
    const float* x = in.x + t0 * n;
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
      FloatPanelsWidened<kW>(pw, in, t0, t1, p0, p1, y, ldy);
      return;
    }
  }
  const TileShape shape = FloatShape();
  const FloatGemmFn<kW>* tiles = FloatGemmTable<kW>(shape);
  const FloatGemmFn<kW>* single = kFloatGemm<kW, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
  const int64_t block = std::max<int64_t>(2, kL2WeightBudget / (32 * kFloatKc * kElem<kW>));
  const int64_t T = in.tile_tokens;
  ForEachGemmTile(n, kFloatKc, p0, p1, block, t0, t1, T,
                  [&](int64_t k0, int64_t k1, int64_t t, int64_t tt, int64_t rb, int64_t re) {
    const float* xt = in.x_tiles + (t / T) * n * T + k0 * tt;
    int64_t p = rb;
    for (; p + shape.panels <= re; p += shape.panels) {
      tiles[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + (t - t0) * ldy + (p - p0) * 32, ldy);
    }
    for (; p < re; ++p) {
      single[tt - 1](pw.panel(p), pw.panel_bytes, xt, k0, k1, k0 == 0, y + (t - t0) * ldy + (p - p0) * 32, ldy);
    }
  });
}

// ---- q8 / q4 panels -----------------------------------------------------------------
// A panel is 32 rows, two groups of 16 (G = 2 vectors of rows); its blocks follow each other
// (packed_weights.h), so the GEMV reads one sequential stream per panel.

constexpr int64_t kQ8BlocksPerSlice = 32;
constexpr int kGroups = 2;  // 16-row groups of a 32-row panel
// Code bytes of one block of one 16-row group: Q8 8 quads of 64 bytes, Q4 4 quads of nibbles.
template <bool kQ4>
constexpr int64_t kGroupBytes = kQ4 ? 4 * 64 : 8 * 64;
// Bytes of one block of a panel: both groups' codes, then 32 f16 scales (one cache line).
template <bool kQ4>
constexpr int64_t kBlockBytes = kGroups * kGroupBytes<kQ4> + 64;

// isum[g][j] += the block's integer dot for row group g and token j; x4(quad, j) gives the
// 4 activation codes of quad (k / 4) 0..7 of token j. Integer sums are exact, so the
// order of the vpdpbusd does not matter. kPrefetch: the GEMV's stream, kPrefetchAhead bytes
// ahead into L2, one line per code line.
template <bool kQ4, int T, bool kPrefetch, typename X4>
PAGODA_AVX512_INLINE void BlockDot(const uint8_t* block, X4&& x4, __m512i (&isum)[kGroups][T]) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  constexpr int kLoads = kQ4 ? 4 : 8;
  for (int u = 0; u < kLoads; ++u) {
    __m512i wv[kGroups], hv[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      const uint8_t* line = block + g * kGroupBytes<kQ4> + u * 64;
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchAhead), _MM_HINT_T1);
        if (kL1Ahead > 0) _mm_prefetch(reinterpret_cast<const char*>(line + kL1Ahead), _MM_HINT_T0);
      }
      const __m512i v = _mm512_load_si512(line);
      if constexpr (kQ4) {
        wv[g] = _mm512_and_si512(v, low);                          // k = 4u .. 4u+3
        hv[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);   // k = 16+4u .. 16+4u+3
      } else {
        wv[g] = v;
      }
    }
    for (int j = 0; j < T; ++j) {
      const __m512i xv = _mm512_set1_epi32(x4(u, j));
      for (int g = 0; g < kGroups; ++g) isum[g][j] = _mm512_dpbusd_epi32(isum[g][j], wv[g], xv);
      if constexpr (kQ4) {
        const __m512i xh = _mm512_set1_epi32(x4(4 + u, j));
        for (int g = 0; g < kGroups; ++g) isum[g][j] = _mm512_dpbusd_epi32(isum[g][j], hv[g], xh);
      }
    }
  }
}

// acc[g][j] += float(isum[g][j]) * (dw_g * dx_j) for the block's 32 scales at `scales`.
template <int T, typename Dx>
PAGODA_AVX512_INLINE void BlockScale(const uint8_t* scales, Dx&& dx, const __m512i (&isum)[kGroups][T],
                                     __m512 (&acc)[kGroups][T]) {
  const __m512i s = _mm512_load_si512(scales);
  const __m512 dw[kGroups] = {_mm512_cvtph_ps(_mm512_castsi512_si256(s)),
                              _mm512_cvtph_ps(_mm512_extracti64x4_epi64(s, 1))};
  for (int j = 0; j < T; ++j) {
    const __m512 d = _mm512_set1_ps(dx(j));
    for (int g = 0; g < kGroups; ++g) {
      acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][j]), _mm512_mul_ps(dw[g], d), acc[g][j]);
    }
  }
}

// The GEMV: one panel x token t, all blocks, activations read in place, streaming the panel
// with a prefetch ahead. y: rows of the panel.
template <bool kQ4>
PAGODA_AVX512 void Q8Gemv(const PackedWeights& pw, int64_t panel, const QuantizedActivations& xq, int64_t t,
                          float* y) {
  __m512 acc[kGroups][1] = {{_mm512_setzero_ps()}, {_mm512_setzero_ps()}};
  const uint8_t* block = pw.panel(panel);
  const int8_t* xc = xq.q_row(t);
  const float* xd = xq.d_row(t);
  const int32_t* xbias = xq.bias128_row(t);
  const int64_t nb = pw.num_blocks();
  for (int64_t b = 0; b < nb; ++b, block += kBlockBytes<kQ4>) {
    __m512i isum[kGroups][1];
    // Q4: nibble codes n = w + 8, so the correction is -8 * sum(x) = bias128 / 16.
    isum[0][0] = isum[1][0] = _mm512_set1_epi32(kQ4 ? xbias[b] / 16 : xbias[b]);
    BlockDot<kQ4, 1, true>(block, [&](int quad, int) {
      int32_t x4;
      std::memcpy(&x4, xc + b * 32 + quad * 4, 4);
      return x4;
    }, isum);
    const uint8_t* scales = block + kGroups * kGroupBytes<kQ4>;
    _mm_prefetch(reinterpret_cast<const char*>(scales + kPrefetchAhead), _MM_HINT_T1);
    BlockScale<1>(scales, [&](int) { return xd[b]; }, isum, acc);
  }
  _mm512_storeu_ps(y, acc[0][0]);
  _mm512_storeu_ps(y + 16, acc[1][0]);
}

// GEMM tile: one panel x T tokens over blocks [b0, b1), activations in token tiles
// (QuantizedTokenTiles) from block b0: the 4 codes of token j at quad u of block b at
// x4[((b - b0) * 8 + u) * T + j], its bias and scale at bias[(b - b0) * T + j], dx[...]. Same
// per-output order as Q8Gemv. Each integer sum starts as its own broadcast from memory (a load,
// no vector ALU uop: 12 register copies of a shared broadcast would take slots from the
// vpdpbusd). `first`: start from zero, else from y (token j at y[j * ldy]).
struct QPack {
  const int32_t* x4;
  const int32_t* bias;
  const float* dx;
};

// The Q8_0 / Q4_0 GEMM tile of 6 tokens (the one a prefill spends its time in) over blocks
// [b0, b1), as Q8GemmTile<kQ4, 6> computes it, with the register allocation written out:
// integer sums in zmm0-11, codes zmm12-15, weight scales zmm14-15, combined scales zmm16-17,
// the 12 float sums in zmm20-31. Each vpdpbusd reads its token's 4 codes as an embedded
// broadcast and each scale product its token's scale the same way, so a Q8_0 block is 134
// vector ALU ops in ~170 uops. (GCC's allocation of the intrinsic version spills the float
// sums and copies broadcasts between registers: ~260 uops. The ports are the same, but with
// the sibling hyperthread busy the issue slots run out first.) Q4_0: per quad of both groups
// one load, AND for the low nibbles, shift + AND for the high ones, as BlockDot. The products
// and sums are the intrinsic version's: cvt(isum) * (dw * dx) + acc, one rounding each, in the
// same order.
template <bool kQ4>
PAGODA_AVX512 void Q8GemmTile6(const uint8_t* block, QPack xp, int64_t nblocks, float* y, int64_t ldy, bool first) {
  const int32_t* x4 = xp.x4;
  const int32_t* bias = xp.bias;
  const float* dx = xp.dx;
  float* const y3 = y + 3 * ldy;  // tokens 0-2 at y + j * ldy, 3-5 at y3 + (j - 3) * ldy
  const int64_t ldy4 = ldy * 4;
  const __m512i low = _mm512_set1_epi8(0x0f);
  static_assert(kBlockBytes<false> == 1088 && kGroupBytes<false> == 512, "q8 block layout");
  static_assert(kBlockBytes<true> == 576 && kGroupBytes<true> == 256, "q4 block layout");
  // Per block: quad u of token j's codes at x4 byte 24u + 4j, its bias and scale at 4j.
#define PAGODA_Q8_INIT(j, r0, r1) \
  "vpbroadcastd 4*" #j "(%[bias]), %%zmm" #r0 "\n\t" \
  "vpbroadcastd 4*" #j "(%[bias]), %%zmm" #r1 "\n\t"
#define PAGODA_Q8_DOT(quad, wa, wb, j, r0, r1) \
  "vpdpbusd " quad "+4*" #j "(%[x4])%{1to16%}, %%zmm" #wa ", %%zmm" #r0 "\n\t" \
  "vpdpbusd " quad "+4*" #j "(%[x4])%{1to16%}, %%zmm" #wb ", %%zmm" #r1 "\n\t"
// The 12 dots of one quad (byte offset `quad` in x4) with group codes in zmm wa / wb.
#define PAGODA_Q8_DOTS(quad, wa, wb)                                                    \
  PAGODA_Q8_DOT(quad, wa, wb, 0, 0, 6) PAGODA_Q8_DOT(quad, wa, wb, 1, 1, 7)              \
  PAGODA_Q8_DOT(quad, wa, wb, 2, 2, 8) PAGODA_Q8_DOT(quad, wa, wb, 3, 3, 9)              \
  PAGODA_Q8_DOT(quad, wa, wb, 4, 4, 10) PAGODA_Q8_DOT(quad, wa, wb, 5, 5, 11)
#define PAGODA_Q8_SCALE(j, r0, r1, acc0, acc1)             \
  "vmulps 4*" #j "(%[dx])%{1to16%}, %%zmm14, %%zmm16\n\t" \
  "vmulps 4*" #j "(%[dx])%{1to16%}, %%zmm15, %%zmm17\n\t" \
  "vcvtdq2ps %%zmm" #r0 ", %%zmm" #r0 "\n\t"               \
  "vcvtdq2ps %%zmm" #r1 ", %%zmm" #r1 "\n\t"               \
  "vfmadd231ps %%zmm16, %%zmm" #r0 ", %%zmm" #acc0 "\n\t"  \
  "vfmadd231ps %%zmm17, %%zmm" #r1 ", %%zmm" #acc1 "\n\t"
// X(address of token j's 32 outputs, register of rows 0-15, register of rows 16-31)
#define PAGODA_Q8_TOKENS(X)                                                                      \
  X("(%[y])", 20, 26) X("(%[y],%[ldy4],1)", 21, 27) X("(%[y],%[ldy4],2)", 22, 28)                \
  X("(%[y3])", 23, 29) X("(%[y3],%[ldy4],1)", 24, 30) X("(%[y3],%[ldy4],2)", 25, 31)
// Before the dots: the accumulators from zero or y, the integer sums from the biases.
#define PAGODA_Q8_HEAD                                                                                \
  "test %[first], %[first]\n\t"                                                                        \
  "jz 2f\n\t"                                                                                          \
  ".irp r,20,21,22,23,24,25,26,27,28,29,30,31\n\t"                                                     \
  "vpxord %%zmm\\r, %%zmm\\r, %%zmm\\r\n\t"                                                            \
  ".endr\n\t"                                                                                          \
  "jmp 1f\n\t"                                                                                         \
  "2:\n\t"                                                                                             \
  PAGODA_Q8_TOKENS(PAGODA_ASM_LOAD_ROWS)                                                               \
  "1:\n\t"                                                                                             \
  PAGODA_Q8_INIT(0, 0, 6) PAGODA_Q8_INIT(1, 1, 7) PAGODA_Q8_INIT(2, 2, 8)                              \
  PAGODA_Q8_INIT(3, 3, 9) PAGODA_Q8_INIT(4, 4, 10) PAGODA_Q8_INIT(5, 5, 11)
// After the dots: the block's scales (at byte `scales` of the block), the float update, the
// next block, and at the end the accumulators to y.
#define PAGODA_Q8_TAIL(scales, block_bytes)                                                             \
  "vcvtph2ps " scales "(%[blk]), %%zmm14\n\t"                                                          \
  "vcvtph2ps " scales "+32(%[blk]), %%zmm15\n\t"                                                       \
  PAGODA_Q8_SCALE(0, 0, 6, 20, 26) PAGODA_Q8_SCALE(1, 1, 7, 21, 27) PAGODA_Q8_SCALE(2, 2, 8, 22, 28)   \
  PAGODA_Q8_SCALE(3, 3, 9, 23, 29) PAGODA_Q8_SCALE(4, 4, 10, 24, 30) PAGODA_Q8_SCALE(5, 5, 11, 25, 31) \
  "add $" block_bytes ", %[blk]\n\t"                                                                   \
  "add $192, %[x4]\n\t"                                                                                \
  "add $24, %[bias]\n\t"                                                                               \
  "add $24, %[dx]\n\t"                                                                                 \
  "dec %[n]\n\t"                                                                                       \
  "jnz 1b\n\t"                                                                                         \
  PAGODA_Q8_TOKENS(PAGODA_ASM_STORE_ROWS)
#define PAGODA_Q8_OPERANDS                                                                              \
  : [blk] "+r"(block), [x4] "+r"(x4), [bias] "+r"(bias), [dx] "+r"(dx), [n] "+r"(nblocks)              \
  : [y] "r"(y), [y3] "r"(y3), [ldy4] "r"(ldy4), [first] "r"(static_cast<int64_t>(first)), [low] "v"(low) \
  : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",     \
    "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",    \
    "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "cc", "memory"
  if constexpr (!kQ4) {
    __asm__ volatile(
        PAGODA_Q8_HEAD
        ".irp u,0,1,2,3,4,5,6,7\n\t"
        "vmovdqa64 64*\\u(%[blk]), %%zmm12\n\t"
        "vmovdqa64 512+64*\\u(%[blk]), %%zmm13\n\t"
        PAGODA_Q8_DOTS("24*\\u", 12, 13)
        ".endr\n\t"
        PAGODA_Q8_TAIL("1024", "1088")
        PAGODA_Q8_OPERANDS);
  } else {
    // Quad u's byte holds k = 4u.. (low nibble) and k = 16 + 4u.. (high nibble): quads u, 4 + u.
    __asm__ volatile(
        PAGODA_Q8_HEAD
        ".irp u,0,1,2,3\n\t"
        "vmovdqa64 64*\\u(%[blk]), %%zmm14\n\t"
        "vmovdqa64 256+64*\\u(%[blk]), %%zmm15\n\t"
        "vpandd %[low], %%zmm14, %%zmm12\n\t"
        "vpandd %[low], %%zmm15, %%zmm13\n\t"
        "vpsrlw $4, %%zmm14, %%zmm14\n\t"
        "vpsrlw $4, %%zmm15, %%zmm15\n\t"
        "vpandd %[low], %%zmm14, %%zmm14\n\t"
        "vpandd %[low], %%zmm15, %%zmm15\n\t"
        PAGODA_Q8_DOTS("24*\\u", 12, 13)
        PAGODA_Q8_DOTS("96+24*\\u", 14, 15)
        ".endr\n\t"
        PAGODA_Q8_TAIL("512", "576")
        PAGODA_Q8_OPERANDS);
  }
#undef PAGODA_Q8_INIT
#undef PAGODA_Q8_DOT
#undef PAGODA_Q8_DOTS
#undef PAGODA_Q8_SCALE
#undef PAGODA_Q8_TOKENS
#undef PAGODA_Q8_HEAD
#undef PAGODA_Q8_TAIL
#undef PAGODA_Q8_OPERANDS
}

template <bool kQ4, int T>
PAGODA_AVX512 void Q8GemmTile(const PackedWeights& pw, int64_t panel, QPack xp, int64_t b0, int64_t b1,
                              bool first, float* y, int64_t ldy) {
  if constexpr (T == 6) {
    if (b1 > b0) {
      Q8GemmTile6<kQ4>(pw.panel(panel) + b0 * kBlockBytes<kQ4>, xp, b1 - b0, y, ldy, first);
      return;
    }
  }
  __m512 acc[kGroups][T];
  for (int g = 0; g < kGroups; ++g)
    for (int j = 0; j < T; ++j) acc[g][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + g * 16);
  const uint8_t* block = pw.panel(panel) + b0 * kBlockBytes<kQ4>;
  for (int64_t b = b0; b < b1; ++b, block += kBlockBytes<kQ4>) {
    __m512i isum[kGroups][T];
    for (int j = 0; j < T; ++j)
      for (int g = 0; g < kGroups; ++g) __asm__("vpbroadcastd %1, %0" : "=v"(isum[g][j]) : "m"(xp.bias[j]));
    BlockDot<kQ4, T, false>(block, [&](int quad, int j) { return xp.x4[quad * T + j]; }, isum);
    BlockScale<T>(block + kGroups * kGroupBytes<kQ4>, [&](int j) { return xp.dx[j]; }, isum, acc);
    xp.x4 += 8 * T;
    xp.bias += T;
    xp.dx += T;
  }
  for (int g = 0; g < kGroups; ++g)
    for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy + g * 16, acc[g][j]);
}

using Q8TileFn = void (*)(const PackedWeights&, int64_t, QPack, int64_t, int64_t, bool, float*, int64_t);
template <bool kQ4, int... Ts>
constexpr Q8TileFn kQ8Gemm[] = {&Q8GemmTile<kQ4, Ts>...};

// Tokens of the GEMM tile (one panel x T: 2T integer and 2T float accumulators).
// PAGODA_GEMM_TILE_Q8=1x6|1x4 overrides the default 1x6 (for tuning on a new CPU).
int64_t Q8TileTokens() {
  static const int64_t t = [] {
    const TileShape s = ParseShape("PAGODA_GEMM_TILE_Q8", {1, 6});
    return s.panels == 1 && s.tokens == 4 ? int64_t{4} : int64_t{6};
  }();
  return t;
}

// Panels [p0, p1) x tokens [t0, t1). The GEMV streams each panel once; the GEMM walks blocks in
// slices of kQ8BlocksPerSlice, rows in blocks of panels that stay in L2 and the token tiles of
// in.q_tiles.
template <bool kQ4>
PAGODA_AVX512 void Q8Panels(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1,
                            int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t nb = pw.num_blocks();
  if (t1 - t0 == 1) {
    for (int64_t p = p0; p < p1; ++p) Q8Gemv<kQ4>(pw, p, *in.xq, t0, y + (p - p0) * 32);
    return;
  }
  const int64_t tp = Q8TileTokens();
  const Q8TileFn* tiles = tp == 4 ? kQ8Gemm<kQ4, 1, 2, 3, 4> : kQ8Gemm<kQ4, 1, 2, 3, 4, 5, 6>;
  const QuantizedTokenTiles& qt = *in.q_tiles;  // tiles of tp tokens (PackedTileTokensAvx512)
  const int64_t block = std::max<int64_t>(1, kL2WeightBudget / (kQ8BlocksPerSlice * kBlockBytes<kQ4>));
  ForEachGemmTile(nb, kQ8BlocksPerSlice, p0, p1, block, t0, t1, tp,
                  [&](int64_t b0, int64_t b1, int64_t t, int64_t tt, int64_t rb, int64_t re) {
    const int64_t i = t / tp;
    const QPack xpk{qt.x4.data() + i * nb * 8 * tp + b0 * 8 * tt, qt.bias.data() + i * nb * tp + b0 * tt,
                    qt.d.data() + i * nb * tp + b0 * tt};
    for (int64_t p = rb; p < re; ++p) {
      tiles[tt - 1](pw, p, xpk, b0, b1, b0 == 0, y + (t - t0) * ldy + (p - p0) * 32, ldy);
    }
  });
}

#undef PAGODA_ASM_LOAD_ROWS
#undef PAGODA_ASM_STORE_ROWS

}  // namespace

int64_t PackedTileTokensAvx512(const PackedWeights& pw) {
  return pw.format == PackedWeights::Format::kFloat ? FloatShape().tokens : Q8TileTokens();
}

void PackedRowsAvx512(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                      int64_t p1, float* y, int64_t ldy) {
  if (pw.format == PackedWeights::Format::kQ8) {
    Q8Panels<false>(pw, in, t0, t1, p0, p1, y, ldy);
    return;
  }
  if (pw.format == PackedWeights::Format::kQ4) {
    Q8Panels<true>(pw, in, t0, t1, p0, p1, y, ldy);
    return;
  }
  switch (pw.dtype) {
    case DType::kF32: FloatPanels<DType::kF32>(pw, in, t0, t1, p0, p1, y, ldy); return;
    case DType::kF16: FloatPanels<DType::kF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
    default: FloatPanels<DType::kBF16>(pw, in, t0, t1, p0, p1, y, ldy); return;
  }
}

}  // namespace pagoda::matmul_internal
