#include "kernels/cuda/norm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxThreads = 1024;
constexpr int kVecPerThread = 4;  // float4s of x (and of the weight) a thread holds: rows up to 16384 columns

// The sum of squares in float64 like the CPU kernel, so rows agree to the last f32 rounding
// of the products (each product of two floats is exact in double; only the order of the
// additions differs, far below f32's rounding of the scale).
__device__ __forceinline__ double BlockSum(double v, double* partial) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
  return total;
}

__device__ __forceinline__ float InvRms(double ss, const RmsNormParams& p) {
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(p.cols) + p.eps));
}

// Rows of a multiple of 4 columns with 16-byte aligned rows: every thread loads its float4s of
// x and of the weight into registers at once (one round trip to memory, not one per loop
// turn), then scales them.
// One block per row of up to kMaxThreads threads; y may alias x.
__global__ void __launch_bounds__(kMaxThreads) RmsNormVec4Kernel(RmsNormParams p) {
  AllowDependentLaunch();  // a decode GEMM after it prefetches its weights meanwhile
  GridDependencyWait();    // x from the kernel ahead
  __shared__ double partial[kMaxThreads / 32];
  const int64_t r = blockIdx.x;
  const float4* x = reinterpret_cast<const float4*>(p.x + r * p.x_stride);
  float4* y = reinterpret_cast<float4*>(p.y + r * p.y_stride);
  const float4* w = reinterpret_cast<const float4*>(p.weight);
  const int n4 = static_cast<int>(p.cols / 4);
  // x and the weight requested together: one round trip to memory before the reduction.
  float4 v[kVecPerThread], g[kVecPerThread];
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    v[k] = i < n4 ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    g[k] = i < n4 ? w[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    ss += static_cast<double>(v[k].x) * v[k].x;
    ss += static_cast<double>(v[k].y) * v[k].y;
    ss += static_cast<double>(v[k].z) * v[k].z;
    ss += static_cast<double>(v[k].w) * v[k].w;
  }
  const float inv = InvRms(BlockSum(ss, partial), p);
  uint2* yb = p.y_bf16 != nullptr ? reinterpret_cast<uint2*>(p.y_bf16 + r * p.cols) : nullptr;
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) {
      const float4 o = make_float4(v[k].x * inv * g[k].x, v[k].y * inv * g[k].y, v[k].z * inv * g[k].z,
                                   v[k].w * inv * g[k].w);
      y[i] = o;
      if (yb != nullptr) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(o.x, o.y), hi = __floats2bfloat162_rn(o.z, o.w);
        yb[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
      }
    }
  }
}

// Any other row: strided loops, x read twice. y may alias x (each thread rewrites only the
// values it read).
__global__ void RmsNormKernel(RmsNormParams p) {
  AllowDependentLaunch();
  GridDependencyWait();
  __shared__ double partial[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* x = p.x + r * p.x_stride;
  float* y = p.y + r * p.y_stride;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  const float inv = InvRms(BlockSum(ss, partial), p);
  __nv_bfloat16* yb = p.y_bf16 != nullptr ? reinterpret_cast<__nv_bfloat16*>(p.y_bf16) + r * p.cols : nullptr;
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) {
    const float o = x[i] * inv * p.weight[i];
    y[i] = o;
    if (yb != nullptr) yb[i] = __float2bfloat16_rn(o);
  }
}

}  // namespace

void RmsNorm(const RmsNormParams& p, cudaStream_t stream, bool pdl) {
  if (p.rows <= 0) return;
  const int64_t n4 = p.cols / 4;
  const bool vec = p.cols % 4 == 0 && p.x_stride % 4 == 0 && p.y_stride % 4 == 0 && Aligned16(p.x) &&
                   Aligned16(p.y) && Aligned16(p.weight) && n4 <= int64_t{kMaxThreads} * kVecPerThread &&
                   reinterpret_cast<uintptr_t>(p.y_bf16) % 8 == 0;
  if (vec) {
    // The thread count depends on the columns only (a row's bits do not depend on the batch):
    // kVecPerThread float4s a thread where the row has that many, so that a block is small and
    // an SM holds many rows' loads in flight (4096 columns: 256 threads; with 1024 threads a
    // row, the H200 ran the 4096-token prefill's norms at a quarter of the copy bandwidth).
    const int64_t per_thread = std::min<int64_t>(kVecPerThread, std::max<int64_t>(1, (n4 + 31) / 32));
    const int64_t wanted = (n4 + per_thread - 1) / per_thread;
    const int threads = static_cast<int>(std::clamp<int64_t>((wanted + 31) / 32 * 32, 32, kMaxThreads));
    LaunchDependent(RmsNormVec4Kernel, dim3(static_cast<unsigned>(p.rows)), dim3(threads), 0, stream, pdl, p);
    return;
  }
  LaunchDependent(RmsNormKernel, dim3(static_cast<unsigned>(p.rows)), dim3(kThreads), 0, stream, pdl, p);
}

}  // namespace pagoda::cuda
