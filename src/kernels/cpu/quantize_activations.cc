// QuantizeActivations (matmul_internal.h): f32 activations to int8 codes per block of 32
// for the integer dot-product kernels. The AVX2 and AVX-512 versions compute exactly what
// the portable one does (same max, same IEEE division and product, round half away from
// zero done exactly as trunc + a +-1 correction), so every level gets the same codes.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PAGODA_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))

namespace pagoda::matmul_internal {
namespace {

// How far ahead a row's blocks are prefetched: a q8_0 llama-1b prefill spent 3.6-4.0% of its
// time quantizing without, 2.8-2.9% with 4 KiB (8 KiB: 2.7-3.0%).
constexpr int64_t kQuantizePrefetchBytes = 4096;

// One block of 32: codes q, returns the scale d; *sum = sum of the codes.
float QuantizeBlockGeneric(const float* src, int8_t* q, int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) {
    const long v = std::lround(src[i] * id);
    q[i] = static_cast<int8_t>(std::clamp<long>(v, -127, 127));
    s += q[i];
  }
  *sum = s;
  return d;
}

PAGODA_AVX2 float QuantizeBlockAvx2(const float* src, int8_t* q, int32_t* sum) {
  const char* ahead = reinterpret_cast<const char*>(src) + kQuantizePrefetchBytes;
  _mm_prefetch(ahead, _MM_HINT_T0);
  _mm_prefetch(ahead + 64, _MM_HINT_T0);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(src + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float d = _mm_cvtss_f32(h) / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256i qi[4];
  __m256i s = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256 x = _mm256_mul_ps(v[i], id);
    const __m256 t = _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(x, t));
    const __m256 away = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ),
                                      _mm256_or_ps(one, _mm256_and_ps(sign, x)));
    __m256i r = _mm256_cvttps_epi32(_mm256_add_ps(t, away));
    r = _mm256_max_epi32(_mm256_min_epi32(r, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    qi[i] = r;
    s = _mm256_add_epi32(s, r);
  }
  const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *sum = _mm_cvtsi128_si32(s4);
  return d;
}

#define PAGODA_AVX512_INLINE \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline

// The 32 codes of one block given its inverse scale id; returns their sum.
PAGODA_AVX512_INLINE int32_t QuantizeBlockWithInverseAvx512(const float* src, float inverse, int8_t* q) {
  const __m512 id = _mm512_set1_ps(inverse);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-1.0f);
  __m512i s = _mm512_setzero_si512();
  for (int i = 0; i < 2; ++i) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(src + 16 * i), id);
    const __m512 t = _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(x, t)), half, _CMP_GE_OQ);
    const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 step = _mm512_mask_blend_ps(negative, one, neg);
    __m512i r = _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, step));
    r = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    s = _mm512_add_epi32(s, r);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * i), _mm512_cvtsepi32_epi8(r));
  }
  return _mm512_reduce_add_epi32(s);
}

PAGODA_AVX512_INLINE float BlockMaxAvx512(const float* src) {
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src)), _mm512_abs_ps(_mm512_loadu_ps(src + 16))));
}

PAGODA_AVX512 float QuantizeBlockAvx512(const float* src, int8_t* q, int32_t* sum) {
  const float d = BlockMaxAvx512(src) / 127.0f;
  *sum = QuantizeBlockWithInverseAvx512(src, d != 0.0f ? 1.0f / d : 0.0f, q);
  return d;
}

// A whole row at AVX-512: the blocks' maxima 16 at a time, then their scales and inverses as one
// vector division each (two dependent scalar divisions per block were the row's critical path),
// then each block as QuantizeBlockAvx512 does with its scale: the same codes, scales and sums.
PAGODA_AVX512 void QuantizeRowAvx512(const float* src, int64_t nb, int8_t* q, float* d_out, int32_t* sums) {
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int64_t m = nb - b0 < 16 ? nb - b0 : 16;
    alignas(64) float amax[16] = {};
    for (int64_t b = 0; b < m; ++b) {
      // The rows come from L3 (a prefill's activations outgrow L2): ask for them ahead of the
      // hardware prefetcher (past the row's end it runs into the next row, prefetches do not fault).
      const char* ahead = reinterpret_cast<const char*>(src + (b0 + b) * 32) + kQuantizePrefetchBytes;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      amax[b] = BlockMaxAvx512(src + (b0 + b) * 32);
    }
    const __m512 d = _mm512_div_ps(_mm512_load_ps(amax), _mm512_set1_ps(127.0f));
    // id = d != 0 ? 1 / d : 0, with C's != (true for NaN).
    const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float dv[16], idv[16];
    _mm512_store_ps(dv, d);
    _mm512_store_ps(idv, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
    for (int64_t b = 0; b < m; ++b) {
      sums[b0 + b] = QuantizeBlockWithInverseAvx512(src + (b0 + b) * 32, idv[b], q + (b0 + b) * 32);
      d_out[b0 + b] = dv[b];
    }
  }
}

using QuantizeBlockFn = float (*)(const float*, int8_t*, int32_t*);

}  // namespace

void QuantizeActivationsAt(IsaLevel level, const float* x, int64_t num_tokens, int64_t cols,
                           bool with_offset_sums, QuantizedActivations* out, bool with_bias128) {
  const QuantizeBlockFn fn = level == IsaLevel::kAvx512 ? &QuantizeBlockAvx512
                             : level == IsaLevel::kAvx2 ? &QuantizeBlockAvx2
                                                        : &QuantizeBlockGeneric;
  out->num_tokens = num_tokens;
  out->cols = cols;
  out->num_blocks = cols / 32;
  out->q.resize(num_tokens * cols);
  out->d.resize(num_tokens * out->num_blocks);
  out->offset_sums.resize(with_offset_sums ? num_tokens * out->num_blocks * 8 : 0);
  out->bias128.resize(with_bias128 ? num_tokens * out->num_blocks : 0);
  const int64_t nb = out->num_blocks;
  ParallelFor(num_tokens, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
              [&](int64_t t0, int64_t t1) {
    thread_local std::vector<int32_t> row_sums;  // kept per thread: no allocation per call
    if (level == IsaLevel::kAvx512 && static_cast<int64_t>(row_sums.size()) < nb) row_sums.resize(nb);
    for (int64_t t = t0; t < t1; ++t) {
      if (level == IsaLevel::kAvx512) {
        QuantizeRowAvx512(x + t * cols, nb, out->q.data() + t * cols, out->d.data() + t * nb, row_sums.data());
      }
      for (int64_t b = 0; b < nb; ++b) {
        int8_t* q = out->q.data() + t * cols + b * 32;
        int32_t sum = 0;
        if (level == IsaLevel::kAvx512) {
          sum = row_sums[b];
        } else {
          out->d[t * nb + b] = fn(x + t * cols + b * 32, q, &sum);
        }
        if (with_bias128) out->bias128[t * nb + b] = -128 * sum;
        if (with_offset_sums) {
          int32_t* s = out->offset_sums.data() + (t * nb + b) * 8;
          for (int j = 0; j < 8; ++j) {
            s[j] = 8 * (q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3]);
          }
        }
      }
    }
  });
}

void QuantizeActivations(const float* x, int64_t num_tokens, int64_t cols, bool with_offset_sums,
                         QuantizedActivations* out, bool with_bias128) {
  const ScopedOpTimer timer(OpKind::kQuantize);
  static const IsaLevel level = DefaultIsaLevel();
  QuantizeActivationsAt(level, x, num_tokens, cols, with_offset_sums, out, with_bias128);
}

}  // namespace pagoda::matmul_internal
