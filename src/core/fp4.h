// FP4 E2M1 (the element type of NVIDIA's NVFP4 and OCP MXFP4): 1 sign, 2 exponent
// (bias 1), 1 mantissa bit. Magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}; no inf, no NaN.
// Codes are the low nibble: sign in bit 3.
#pragma once

#include <cstdint>

namespace pagoda {

inline constexpr float kFp4E2M1Max = 6.0f;

// Round to nearest, ties to even mantissa; saturates to +-6; NaN -> +0 (E2M1 has no NaN:
// cuda_fp4.h maps NaN to its largest code, we prefer to drop it; callers never pass NaN).
uint8_t F32ToFp4E2M1(float x);
float Fp4E2M1ToF32(uint8_t nibble);

}  // namespace pagoda
