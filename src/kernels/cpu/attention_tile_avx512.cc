// The attention tile step for AVX-512 (F, BW, DQ, VL): attention_tile.inc at 16 lanes.
// Structurally the AVX2 file with 16 lanes and a 4 x 4 register tile; compiled everywhere,
// run only where matmul_internal::IsaLevelSupported(kAvx512).
// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "kernels/cpu/attention_tile.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")
// Only the explicit Fma fuses, so this level and AVX2 compute the same bits.
#pragma GCC optimize("fp-contract=off")

namespace pagoda::cpu {
namespace {

constexpr int kW = 16;
typedef float V __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
// Register tiles (32 zmm): 4 heads x 4 vectors of accumulators.
constexpr int kScoreHeads = 4, kScoreVecs = 4;
constexpr int kPvHeads = 4, kPvVecs = 4;

inline __attribute__((always_inline)) V Fma(const V& a, const V& b, const V& c) { return _mm512_fmadd_ps(a, b, c); }
inline __attribute__((always_inline)) V LoadBf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return (V)_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}
inline __attribute__((always_inline)) V LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

#include "kernels/cpu/attention_tile.inc"

}  // namespace

AttentionTileKernels AttentionTileAvx512() { return {&Step, &ExpArray}; }

}  // namespace pagoda::cpu

#pragma GCC pop_options
