// Element types of weights, activations and KV blocks, and their conversions.
//
// Quantized weight types follow ggml's block layouts (they are what GGUF files hold):
//   Q8_0: blocks of 32 values = fp16 scale d + 32 x int8 q;        x = d * q
//   Q4_0: blocks of 32 values = fp16 scale d + 16 bytes of nibbles; x = d * (q - 8),
//         the low nibbles hold values 0..15 of the block, the high nibbles 16..31.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pagoda {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kI8,
  kI32,
  kI64,
};

// Name as users write it ("f32", "bf16", "q8_0", ...).
std::string_view DTypeName(DType t);
// Parses a user-facing name; throws InvalidArgument naming `what` on an unknown one.
DType ParseDType(std::string_view name, std::string_view what);

// Values per block (1 for plain types) and bytes per block.
int64_t DTypeBlockSize(DType t);
int64_t DTypeBlockBytes(DType t);
// Bytes for n values; REQUIRES: n is a multiple of the block size.
int64_t DTypeRowBytes(DType t, int64_t n);
bool DTypeIsQuantized(DType t);

// ---- scalar conversions ---------------------------------------------------

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half precision, exact for every input (subnormals, inf, NaN).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
      bits = sign | std::bit_cast<uint32_t>(v);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest even, overflow to inf, NaN kept.
uint16_t F32ToF16(float f);

// Dequantizes n values (a multiple of the block size) of type t at src into dst.
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);
// Quantizes n floats into type t (F32, F16, BF16, Q8_0, Q4_0), ggml's rounding.
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);

}  // namespace pagoda
