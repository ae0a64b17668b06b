// FP8 conversions (OCP 8-bit floating point, as NVIDIA's cuda_fp8.h implements them).
//
//   e4m3 ("fp8", e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
//     0x7f/0xff are NaN; largest finite 448; smallest subnormal 2^-9.
//   e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like with inf (0x7c) and
//     NaN; largest finite 57344; smallest subnormal 2^-16.
//
// Encoding rounds to nearest, ties to even, and SATURATES: any value (or infinity) beyond
// the largest finite value becomes +-max, never NaN or inf by overflow. NaN encodes as 0x7f
// (both formats, whatever the sign). This is bit-for-bit __nv_cvt_float_to_fp8(x,
// __NV_SATFINITE, fmt); src/core/fp8_test.cc checks it exhaustively against a table made
// with the CUDA toolkit (tests/tools/fp8_reference_table.cc).
#pragma once

#include <cstdint>

namespace pagoda {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

uint8_t F32ToFp8E4M3(float x);
uint8_t F32ToFp8E5M2(float x);
// Exact (every fp8 value is a float). Uses a 256-entry table.
float Fp8E4M3ToF32(uint8_t code);
float Fp8E5M2ToF32(uint8_t code);

}  // namespace pagoda
