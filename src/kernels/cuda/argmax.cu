#include "kernels/cuda/argmax.h"

#include <cmath>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;

// (value, index) better than (bv, bi): larger, or equal and earlier. NaN values arrive as -inf.
__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__global__ void __launch_bounds__(kThreads) ArgMaxKernel(const float* logits, int64_t row_stride, int cols,
                                                         int32_t* out) {
  const float* row = logits + blockIdx.x * row_stride;
  float best = -INFINITY;
  int best_i = INT_MAX;
  for (int i = threadIdx.x; i < cols; i += kThreads) {
    float v = row[i];
    if (isnan(v)) v = -INFINITY;
    if (Better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (Better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  __shared__ float values[kThreads / 32];
  __shared__ int indices[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    values[warp] = best;
    indices[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (Better(values[w], indices[w], best, best_i)) {
        best = values[w];
        best_i = indices[w];
      }
    }
    // The CPU's scan keeps index 0 when it is NaN; every value is -inf or NaN: index 0 too.
    out[blockIdx.x] = isnan(row[0]) || best_i == INT_MAX ? 0 : best_i;
  }
}

}  // namespace

void ArgMaxRows(const float* logits, int64_t row_stride, int64_t rows, int64_t cols, int32_t* out,
                cudaStream_t stream) {
  if (rows <= 0) return;
  PAGODA_CHECK(cols > 0 && cols < 2147483647) << "ArgMaxRows: " << cols << " columns";
  ArgMaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, row_stride, static_cast<int>(cols), out);
  PAGODA_CUDA_CHECK_LAUNCH("ArgMaxKernel");
}

}  // namespace pagoda::cuda
