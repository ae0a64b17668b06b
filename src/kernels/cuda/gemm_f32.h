// The product of f32 weights on the device: y (+)= x W^T on CUDA cores, f32 products summed
// in k order (no TF32), 64 x 64 output tiles. Models with f32 weights (llama2.c's) run here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

// x [m, k] (row stride x_stride), W [n, k] contiguous, y [m, n] (row stride y_stride); accumulate:
// y += x W^T.
void GemmF32(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t n, int64_t k, float* y,
             int64_t y_stride, bool accumulate, cudaStream_t stream);

}  // namespace pagoda::cuda
