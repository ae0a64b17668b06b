// Portable kernels for packed weights (packed_weights.h): any panel shape, any CPU.
// They define what the vector levels compute per output (one accumulator over k in
// order; quantized (Q8_0, Q4_0): per block an exact integer dot, then
// acc += float(isum) * (dw*dx)),
// with separate multiply and add where the vector levels fuse them into an FMA.
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

namespace pagoda::matmul_internal {
namespace {

// Weight of panel slot `slot` at k, widened exactly.
inline float LoadSlot(DType dtype, const uint8_t* panel, int64_t k, int64_t pr, int64_t slot) {
  const int64_t i = k * pr + slot;
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, panel + 4 * i, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, panel + 2 * i, 2);
      return F16ToF32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, panel + 2 * i, 2);
      return Bf16ToF32(h);
    }
  }
}

void FloatPanels(const PackedWeights& pw, const float* x, int64_t num_tokens, int64_t p0,
                 int64_t p1, float* y, int64_t ldy) {
  const int64_t pr = pw.panel_rows, n = pw.cols, half = pr / 2;
  std::vector<float> acc(pr);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = pw.panel(p);
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* xt = x + t * n;
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t s = 0; s < pr; ++s) {
          // slot s holds row s (F32/F16) or, for BF16, row s/2 (+ half when s is odd).
          const int64_t row = pw.dtype == DType::kBF16 ? s / 2 + (s % 2) * half : s;
          acc[row] = acc[row] + LoadSlot(pw.dtype, panel, k, pr, s) * xt[k];
        }
      }
      std::copy(acc.begin(), acc.end(), y + t * ldy + (p - p0) * pr);
    }
  }
}

void Q8Panels(const PackedWeights& pw, const QuantizedActivations& xq, int64_t num_tokens,
              int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t pr = pw.panel_rows, nb = pw.num_blocks();
  const bool q4 = pw.format == PackedWeights::Format::kQ4;
  std::vector<float> acc(pr);
  std::vector<int32_t> isum(pr);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* codes = pw.panel(p);
    const uint16_t* scales = pw.q_scales(p);
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int8_t* xc = xq.q_row(t);
      for (int64_t b = 0; b < nb; ++b) {
        if (q4) {
          std::fill(isum.begin(), isum.end(), xq.bias128_row(t)[b] / 16);
          for (int64_t quad = 0; quad < 4; ++quad) {
            const uint8_t* c = codes + (b * 4 + quad) * pr * 4;
            const int8_t* lo = xc + b * 32 + quad * 4;
            const int8_t* hi = lo + 16;
            for (int64_t j = 0; j < pr; ++j) {
              for (int i = 0; i < 4; ++i) {
                isum[j] += int32_t{c[j * 4 + i] & 0x0f} * lo[i] + int32_t{c[j * 4 + i] >> 4} * hi[i];
              }
            }
          }
        } else {
          std::fill(isum.begin(), isum.end(), xq.bias128_row(t)[b]);
          for (int64_t quad = 0; quad < 8; ++quad) {
            const uint8_t* c = codes + (b * 8 + quad) * pr * 4;
            const int8_t* xv = xc + b * 32 + quad * 4;
            for (int64_t j = 0; j < pr; ++j) {
              for (int i = 0; i < 4; ++i) isum[j] += int32_t{c[j * 4 + i]} * xv[i];
            }
          }
        }
        const float dx = xq.d_row(t)[b];
        for (int64_t j = 0; j < pr; ++j) {
          acc[j] = acc[j] + static_cast<float>(isum[j]) * (F16ToF32(scales[b * pr + j]) * dx);
        }
      }
      std::copy(acc.begin(), acc.end(), y + t * ldy + (p - p0) * pr);
    }
  }
}

}  // namespace

void PackedRowsGeneric(const PackedWeights& pw, const float* x, const QuantizedActivations* xq,
                       int64_t num_tokens, int64_t p0, int64_t p1, float* y, int64_t ldy) {
  if (pw.format != PackedWeights::Format::kFloat) {  // Q8 or Q4 panels
    Q8Panels(pw, *xq, num_tokens, p0, p1, y, ldy);
  } else {
    FloatPanels(pw, x, num_tokens, p0, p1, y, ldy);
  }
}

}  // namespace pagoda::matmul_internal
