// The portable attention tile step: attention_tile.inc at 16 lanes of GCC vector extensions,
// for any target (on baseline x86-64 each vector is four SSE registers). Unfused multiply-adds,
// so its bits differ from the AVX2 / AVX-512 levels; the lane structure is the AVX-512 one.
// Every function taking or returning a vector is inlined: no vector crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <array>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "kernels/cpu/attention_tile.h"

namespace pagoda::cpu {
namespace {

constexpr int kW = 16;
typedef float V __attribute__((vector_size(4 * kW)));
typedef int32_t VI __attribute__((vector_size(4 * kW)));
constexpr int kScoreHeads = 4, kScoreVecs = 4;
constexpr int kPvHeads = 4, kPvVecs = 4;

inline __attribute__((always_inline)) V Fma(const V& a, const V& b, const V& c) { return a * b + c; }
inline __attribute__((always_inline)) V LoadBf16(const uint16_t* p) {
  typedef uint16_t H __attribute__((vector_size(2 * kW)));
  typedef uint32_t U __attribute__((vector_size(4 * kW)));
  H h;
  __builtin_memcpy(&h, p, sizeof(h));
  return (V)(__builtin_convertvector(h, U) << 16);
}
inline __attribute__((always_inline)) V LoadF16(const uint16_t* p) {
  V v;
  for (int i = 0; i < kW; ++i) v[i] = F16ToF32(p[i]);
  return v;
}

#include "kernels/cpu/attention_tile.inc"

}  // namespace

AttentionTileKernels AttentionTileGeneric() { return {&Step, &ExpArray}; }

}  // namespace pagoda::cpu
