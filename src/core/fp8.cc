#include "core/fp8.h"

#include <array>
#include <cmath>

namespace pagoda {
namespace {

// Small IEEE-style formats: kMan mantissa bits, exponent bias kBias, largest finite
// magnitude code kMaxCode (0x7e for e4m3, 0x7b for e5m2).
template <int kMan, int kBias, uint8_t kMaxCode>
uint8_t Encode(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  const double max_value = std::ldexp(1.0 + (kMaxCode & ((1 << kMan) - 1)) / double(1 << kMan),
                                      (kMaxCode >> kMan) - kBias);
  if (a >= max_value) return sign | kMaxCode;  // saturate (inf included)
  int e = std::ilogb(a == 0.0 ? 1.0 : a);
  const int min_exp = 1 - kBias;
  if (a == 0.0 || e < min_exp) {
    // Subnormal: multiples of 2^(min_exp - kMan); nearbyint rounds half to even.
    const double m = std::nearbyint(std::ldexp(a, kMan - min_exp));
    return sign | static_cast<uint8_t>(m);  // m == 2^kMan lands on the smallest normal
  }
  double m = std::nearbyint(std::ldexp(a, kMan - e));  // in [2^kMan, 2^(kMan+1)]
  if (m >= double(2 << kMan)) {
    m /= 2;
    ++e;
  }
  const int code = ((e + kBias) << kMan) | (static_cast<int>(m) - (1 << kMan));
  return sign | static_cast<uint8_t>(code > kMaxCode ? kMaxCode : code);
}

template <int kMan, int kBias, bool kHasInf>
std::array<float, 256> DecodeTable() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int mag = c & 0x7f;
    const int exp = mag >> kMan, man = mag & ((1 << kMan) - 1);
    const int exp_max = (1 << (7 - kMan)) - 1;
    double v;
    if (kHasInf && exp == exp_max) {
      v = man == 0 ? INFINITY : NAN;
    } else if (!kHasInf && mag == 0x7f) {
      v = NAN;
    } else if (exp == 0) {
      v = std::ldexp(man, 1 - kBias - kMan);
    } else {
      v = std::ldexp(1.0 + man / double(1 << kMan), exp - kBias);
    }
    t[c] = static_cast<float>((c & 0x80) ? -v : v);
  }
  return t;
}

const std::array<float, 256> kE4M3 = DecodeTable<3, 7, false>();
const std::array<float, 256> kE5M2 = DecodeTable<2, 15, true>();

}  // namespace

uint8_t F32ToFp8E4M3(float x) { return Encode<3, 7, 0x7e>(x); }
uint8_t F32ToFp8E5M2(float x) { return Encode<2, 15, 0x7b>(x); }
float Fp8E4M3ToF32(uint8_t code) { return kE4M3[code]; }
float Fp8E5M2ToF32(uint8_t code) { return kE5M2[code]; }

}  // namespace pagoda
