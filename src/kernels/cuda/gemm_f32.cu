#include "kernels/cuda/gemm_f32.h"

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

// f32 weights: a 64 x 64 output tile per block, 4 x 4 outputs per thread, k in order.
__global__ void __launch_bounds__(256) GemmF32Kernel(const float* x, int64_t x_stride, int m, const float* w, int n,
                                                     int k, float* y, int64_t y_stride, bool accumulate) {
  __shared__ float xs[16][64 + 1];
  __shared__ float ws[16][64 + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += 16) {
    for (int i = threadIdx.x; i < 64 * 16; i += 256) {
      const int r = i / 16, kk = i % 16;
      const bool kin = k0 + kk < k;
      xs[kk][r] = (m0 + r < m && kin) ? x[static_cast<int64_t>(m0 + r) * x_stride + k0 + kk] : 0.0f;
      ws[kk][r] = (n0 + r < n && kin) ? w[static_cast<int64_t>(n0 + r) * k + k0 + kk] : 0.0f;
    }
    __syncthreads();
    const int kn = min(16, k - k0);
    for (int kk = 0; kk < kn; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (row >= m || col >= n) continue;
      float* out = y + static_cast<int64_t>(row) * y_stride + col;
      *out = accumulate ? __fadd_rn(*out, acc[i][j]) : acc[i][j];
    }
  }
}

}  // namespace

void GemmF32(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t n, int64_t k, float* y,
             int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const dim3 grid(static_cast<unsigned>((n + 63) / 64), static_cast<unsigned>((m + 63) / 64));
  GemmF32Kernel<<<grid, 256, 0, stream>>>(x, x_stride, static_cast<int>(m), w, static_cast<int>(n),
                                          static_cast<int>(k), y, y_stride, accumulate);
  PAGODA_CUDA_CHECK_LAUNCH("GemmF32Kernel");
}

}  // namespace pagoda::cuda
