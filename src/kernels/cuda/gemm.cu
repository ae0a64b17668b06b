#include "kernels/cuda/gemm.h"

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {

void GemmF32(cublasHandle_t handle, const float* x, int64_t x_stride, int64_t n, const float* w, int64_t m, int64_t k,
             float* y, int64_t y_stride, float beta) {
  if (n <= 0 || m <= 0) return;
  const float alpha = 1.0f;
  // Column-major view: y^T [m, n] = W [m, k] (W^T stored as [k, m] col-major, op T) * x^T [k, n].
  PAGODA_CUDA_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                 static_cast<int>(k), &alpha, w, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F,
                                 static_cast<int>(x_stride), &beta, y, CUDA_R_32F, static_cast<int>(y_stride),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace pagoda::cuda
