// Portable kernels: any CPU. Same reduction shape as the vector levels (a 1x8-lane
// accumulator for float weights, per-block integer dots for quantized ones), written
// so that the compiler's auto-vectorization cannot change the order of a sum.
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul_internal.h"

namespace pagoda::matmul_internal {
namespace {

float DotF32(const float* w, const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += w[k + j] * x[k + j];
  }
  for (; k < n; ++k) acc[k & 7] += w[k] * x[k];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void RowsFloat(const WeightMatrix& w, const float* x, int64_t num_tokens, int64_t r0, int64_t r1,
               float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    DequantizeRow(w.dtype, w.row(r), row.data(), w.cols);  // exact for F32/F16/BF16
    for (int64_t t = 0; t < num_tokens; ++t) {
      y[t * w.rows + r] = DotF32(row.data(), x + t * w.cols, w.cols);
    }
  }
}

// Weight codes of one block as signed ints (Q8_0: q; Q4_0: nibble - 8) and its scale.
float UnpackBlock(DType dtype, const uint8_t* block, int8_t* codes) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  if (dtype == DType::kQ8_0) {
    std::memcpy(codes, block + 2, 32);
  } else {
    for (int i = 0; i < 16; ++i) {
      codes[i] = static_cast<int8_t>((block[2 + i] & 0x0f) - 8);
      codes[i + 16] = static_cast<int8_t>((block[2 + i] >> 4) - 8);
    }
  }
  return F16ToF32(h);
}

void RowsQuantized(const WeightMatrix& w, const QuantizedActivations& xq, int64_t num_tokens,
                   int64_t r0, int64_t r1, float* y) {
  const int64_t nb = xq.num_blocks;
  const int64_t block_bytes = DTypeBlockBytes(w.dtype);
  std::vector<int8_t> codes(w.cols);
  std::vector<float> scales(nb);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      scales[b] = UnpackBlock(w.dtype, w.row(r) + b * block_bytes, codes.data() + b * 32);
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int8_t* xc = xq.q_row(t);
      const float* xd = xq.d_row(t);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t sumi = 0;
        for (int i = 0; i < 32; ++i) sumi += codes[b * 32 + i] * xc[b * 32 + i];
        acc += static_cast<float>(sumi) * (scales[b] * xd[b]);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

}  // namespace

void MatMulRowsGeneric(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                       int64_t num_tokens, int64_t r0, int64_t r1, float* y) {
  if (xq != nullptr) {
    RowsQuantized(w, *xq, num_tokens, r0, r1, y);
  } else {
    RowsFloat(w, x, num_tokens, r0, r1, y);
  }
}

}  // namespace pagoda::matmul_internal
