// RMSNorm over rows: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, the sum of squares in
// float64 and the scale rounded to f32 once per row (kernels/cpu/norm.cc does the same).
#pragma once

#include <cstdint>

namespace pagoda {

struct RmsNormParams {
  const float* x = nullptr;       // [rows, cols] f32, row stride x_stride
  const float* weight = nullptr;  // [cols] f32
  float* y = nullptr;             // [rows, cols] f32, row stride y_stride; may alias x
  // CUDA: also y rounded to bf16 (nearest even) here, [rows, cols] contiguous: the next
  // GEMM's input, which then skips its own conversion (null: none).
  uint16_t* y_bf16 = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;
  int64_t y_stride = 0;
  double eps = 1e-5;
};

}  // namespace pagoda
