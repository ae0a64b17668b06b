// y = x W^T through cuBLAS in f32 (FP32 compute, no TF32): x [n, k] with row stride
// x_stride, W [m, k] row-major (f32, device), y [n, m] with row stride y_stride;
// beta = 1 adds the product to y (the kAddTo epilogue), beta = 0 overwrites it.
//
// Batch invariance is NOT guaranteed on this path: cuBLAS picks its kernel (tiles, split-K)
// by shape, so a row's bits may change with the number of rows in the batch (measured on
// the H200 for bf16 at N = K = 4096: row 0 differs between M = 1 and M >= 64). The invariant GEMM (CUTLASS sm90 kernels sharing one K order, or a
// fixed split-K) replaces this later.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

namespace pagoda::cuda {

void GemmF32(cublasHandle_t handle, const float* x, int64_t x_stride, int64_t n, const float* w, int64_t m, int64_t k,
             float* y, int64_t y_stride, float beta);

}  // namespace pagoda::cuda
