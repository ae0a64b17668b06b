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
  // Thresholds are the midpoints; a tie goes to the even code (mantissa bit 0).
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return sign | c;
}

float Fp4E2M1ToF32(uint8_t nibble) {
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

}  // namespace pagoda
