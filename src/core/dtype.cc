#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/kquants.h"

namespace pagoda {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
    case DType::kI8: return "i8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

DType ParseDType(std::string_view name, std::string_view what) {
  static constexpr DType kAll[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                   DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "float32") return DType::kF32;
  if (lower == "float16" || lower == "half") return DType::kF16;
  if (lower == "bfloat16") return DType::kBF16;
  for (DType t : kAll) {
    if (DTypeName(t) == lower) return t;
  }
  ThrowInvalidArgument(std::string(what) + ": unknown dtype '" + std::string(name) +
                       "' (expected f32, f16, bf16, q8_0 or q4_0)");
}

int64_t DTypeBlockSize(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return 256;
    default: return 1;
  }
}

int64_t DTypeBlockBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_K: return 144;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
    case DType::kI8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

int64_t DTypeRowBytes(DType t, int64_t n) { return n / DTypeBlockSize(t) * DTypeBlockBytes(t); }

bool DTypeIsQuantized(DType t) { return DTypeBlockSize(t) > 1; }

uint16_t F32ToF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (x < 0x38800000u) {  // result is subnormal or zero
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((x >> 13) - (112u << 10));
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: std::memcpy(dst, p, n * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const float d = F16ToF32(h);
        const auto* q = reinterpret_cast<const int8_t*>(p + 2);
        for (int i = 0; i < 32; ++i) dst[b * 32 + i] = d * static_cast<float>(q[i]);
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 18) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const float d = F16ToF32(h);
        for (int i = 0; i < 16; ++i) {
          dst[b * 32 + i] = d * static_cast<float>((p[2 + i] & 0x0f) - 8);
          dst[b * 32 + i + 16] = d * static_cast<float>((p[2 + i] >> 4) - 8);
        }
      }
      return;
    case DType::kQ4_K: DequantizeRowQ4K(src, dst, n); return;
    case DType::kQ5_K: DequantizeRowQ5K(src, dst, n); return;
    case DType::kQ6_K: DequantizeRowQ6K(src, dst, n); return;
    default:
      ThrowUnsupported("dequantization of " + std::string(DTypeName(t)) + " is not implemented");
  }
}

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::kF32: std::memcpy(p, src, n * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        const float* x = src + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = F32ToF16(d);
        std::memcpy(p, &h, 2);
        for (int i = 0; i < 32; ++i) p[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * id)));
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 18) {
        const float* x = src + b * 32;
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 32; ++i) {
          if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = F32ToF16(d);
        std::memcpy(p, &h, 2);
        for (int i = 0; i < 16; ++i) {
          const int q0 = std::min(15, static_cast<int>(x[i] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[i + 16] * id + 8.5f));
          p[2 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    default:
      ThrowUnsupported("quantization to " + std::string(DTypeName(t)) + " is not implemented");
  }
}

}  // namespace pagoda
