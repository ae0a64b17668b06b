// y = x W^T through cuBLAS in f32 (FP32 compute, no TF32): x [n, k] with row stride
// x_stride, W [m, k] row-major (f32, device), y [n, m] with row stride y_stride;
// beta = 1 adds the product to y (the kAddTo epilogue), beta = 0 overwrites it.
//
// Batch invariance is NOT guaranteed on this path: cuBLAS picks its kernel (tiles, split-K)
// by shape, so a row's bits may change with the number of rows in the batch (issue 23
// measured it for bf16). The invariant GEMM (CUTLASS sm90 kernels sharing one K order, or a
// fixed split-K) replaces this later.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

namespace pagoda::cuda {

void GemmF32(cublasHandle_t handle, const float* x, int64_t x_stride, int64_t n, const float* w, int64_t m, int64_t k,
             float* y, int64_t y_stride, float beta);

}  // namespace pagoda::cuda
