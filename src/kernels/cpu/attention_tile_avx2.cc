// The attention tile step for AVX2 + FMA + F16C: attention_tile.inc at 8 lanes.
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "kernels/cpu/attention_tile.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// Only the explicit Fma fuses, so this level and AVX-512 compute the same bits.
#pragma GCC optimize("fp-contract=off")

namespace pagoda::cpu {
namespace {

constexpr int kW = 8;
typedef float V __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
// Register tiles (16 ymm): 4 heads x 2 vectors of accumulators.
constexpr int kScoreHeads = 4, kScoreVecs = 2;
constexpr int kPvHeads = 4, kPvVecs = 2;

inline __attribute__((always_inline)) V Fma(const V& a, const V& b, const V& c) { return _mm256_fmadd_ps(a, b, c); }
inline __attribute__((always_inline)) V LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return (V)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
}
inline __attribute__((always_inline)) V LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

#include "kernels/cpu/attention_tile.inc"

}  // namespace

AttentionTileKernels AttentionTileAvx2() { return {&Step, &ExpArray}; }

}  // namespace pagoda::cpu

#pragma GCC pop_options
