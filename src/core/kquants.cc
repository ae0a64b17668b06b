#include "core/kquants.h"

#include <cstring>

#include "core/dtype.h"

namespace pagoda {
namespace {

constexpr int64_t kQ4KBytes = 144;
constexpr int64_t kQ5KBytes = 176;
constexpr int64_t kQ6KBytes = 210;

float ReadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes.
// Bytes 0..3 hold scales 0..3 (low 6 bits) and bytes 4..7 mins 0..3; sub-blocks 4..7 keep
// their low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits of 0..7.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void DequantizeRowQ4K(const void* src, float* dst, int64_t n) {
  const auto* block = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQkK; ++b, block += kQ4KBytes) {
    const float d = ReadF16(block);
    const float dmin = ReadF16(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* q = block + 16;
    float* y = dst + b * kQkK;
    for (int j = 0; j < 4; ++j, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(2 * j, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * j + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeRowQ5K(const void* src, float* dst, int64_t n) {
  const auto* block = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQkK; ++b, block += kQ5KBytes) {
    const float d = ReadF16(block);
    const float dmin = ReadF16(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* qh = block + 16;
    const uint8_t* ql = block + 48;
    float* y = dst + b * kQkK;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 4; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      ScaleMinK4(2 * j, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * j + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

void DequantizeRowQ6K(const void* src, float* dst, int64_t n) {
  const auto* block = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQkK; ++b, block += kQ6KBytes) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
    const float d = ReadF16(block + 208);
    float* y = dst + b * kQkK;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace pagoda
