// RoPE applied in place on a device (kernels/cuda/rope.cu), with the semantics of
// kernels/cpu/rope.cc: per token t and head h, the values [offset, offset + dim) of
// x[t, h * head_stride ...] are rotated in pairs (2i, 2i+1) when interleaved, else
// (i, i + dim/2), by angle positions[t] * inv_freq[i] (computed in float64, cos/sin times
// magnitude rounded to f32).
#pragma once

#include <cstdint>

namespace pagoda {

struct RopeApplyParams {
  float* x = nullptr;                  // [num_tokens, row_stride] f32; head h at h * head_stride
  const int32_t* positions = nullptr;  // [num_tokens]
  const double* inv_freq = nullptr;    // [dim / 2] radians per position
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int64_t offset = 0;
  int64_t dim = 0;
  bool interleaved = true;
  double magnitude = 1.0;
};

}  // namespace pagoda
