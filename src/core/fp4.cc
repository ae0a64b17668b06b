#include "core/fp4.h"

#include <cmath>

namespace pagoda {
namespace {
constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
}  // namespace

uint8_t F32ToFp4E2M1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  // Upper bounds of codes 0..6 (the midpoints); a tie goes to the even code (mantissa bit 0),
  // so even codes include their upper midpoint and odd codes exclude it.
  constexpr float kBounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t c = 0;
  while (c < 7 && (c % 2 == 0 ? a > kBounds[c] : a >= kBounds[c])) ++c;
  return sign | c;
}

float Fp4E2M1ToF32(uint8_t nibble) {
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

}  // namespace pagoda
