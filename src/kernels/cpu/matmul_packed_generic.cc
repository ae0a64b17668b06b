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

void FloatPanels(const PackedWeights& pw, const float* x, int64_t t0, int64_t t1, int64_t p0,
                 int64_t p1, float* y, int64_t ldy) {
  const int64_t pr = pw.panel_rows, n = pw.cols, half = pr / 2;
  std::vector<float> acc(pr);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = pw.panel(p);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* xt = x + t * n;
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t s = 0; s < pr; ++s) {
          // slot s holds row s (F32/F16) or, for BF16, row s/2 (+ half when s is odd).
          const int64_t row = pw.dtype == DType::kBF16 ? s / 2 + (s % 2) * half : s;
          acc[row] = acc[row] + LoadSlot(pw.dtype, panel, k, pr, s) * xt[k];
        }
      }
      std::copy(acc.begin(), acc.end(), y + (t - t0) * ldy + (p - p0) * pr);
    }
  }
}

void Q8Panels(const PackedWeights& pw, const QuantizedActivations& xq, int64_t t0, int64_t t1,
              int64_t p0, int64_t p1, float* y, int64_t ldy) {
  const int64_t pr = pw.panel_rows, nb = pw.num_blocks();
  const bool q4 = pw.format == PackedWeights::Format::kQ4;
  const int64_t group_bytes = 16 * pw.block_code_bytes();  // codes of 16 rows of one block
  std::vector<float> acc(pr);
  std::vector<int32_t> isum(pr);
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int8_t* xc = xq.q_row(t);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = pw.q_block(p, b);
        const uint16_t* scales = pw.q_block_scales(p, b);
        for (int64_t j = 0; j < pr; ++j) {
          // row j: lane j % 16 of group j / 16; quad u at byte (u * 16 + lane) * 4 of the group
          const uint8_t* c = block + (j / 16) * group_bytes + (j % 16) * 4;
          int32_t s = xq.bias128_row(t)[b];
          if (q4) {
            s /= 16;
            for (int64_t quad = 0; quad < 4; ++quad) {
              const int8_t* lo = xc + b * 32 + quad * 4;
              const int8_t* hi = lo + 16;
              for (int i = 0; i < 4; ++i) {
                const uint8_t v = c[quad * 64 + i];
                s += int32_t{v & 0x0f} * lo[i] + int32_t{v >> 4} * hi[i];
              }
            }
          } else {
            for (int64_t quad = 0; quad < 8; ++quad) {
              const int8_t* xv = xc + b * 32 + quad * 4;
              for (int i = 0; i < 4; ++i) s += int32_t{c[quad * 64 + i]} * xv[i];
            }
          }
          isum[j] = s;
        }
        const float dx = xq.d_row(t)[b];
        for (int64_t j = 0; j < pr; ++j) {
          acc[j] = acc[j] + static_cast<float>(isum[j]) * (F16ToF32(scales[j]) * dx);
        }
      }
      std::copy(acc.begin(), acc.end(), y + (t - t0) * ldy + (p - p0) * pr);
    }
  }
}

}  // namespace

void PackedRowsGeneric(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                       int64_t p1, float* y, int64_t ldy) {
  if (pw.format != PackedWeights::Format::kFloat) {  // Q8 or Q4 panels
    Q8Panels(pw, *in.xq, t0, t1, p0, p1, y, ldy);
  } else {
    FloatPanels(pw, in.x, t0, t1, p0, p1, y, ldy);
  }
}

}  // namespace pagoda::matmul_internal
