#include "kernels/cuda/norm.h"

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

// The sum of squares in float64 like the CPU kernel, so rows agree to the last f32 rounding
// of the products; y may alias x (each thread rewrites only the values it read).
__global__ void RmsNormKernel(RmsNormParams p) {
  const int64_t r = blockIdx.x;
  const float* x = p.x + r * p.x_stride;
  float* y = p.y + r * p.y_stride;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  __shared__ double partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_down_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  __shared__ float inv;
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
    inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(p.cols) + p.eps));
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) y[i] = x[i] * inv * p.weight[i];
}

}  // namespace

void RmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  RmsNormKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  PAGODA_CUDA_CHECK_LAUNCH("RmsNormKernel");
}

}  // namespace pagoda::cuda
