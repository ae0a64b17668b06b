#include "kernels/cuda/convert_bf16.h"

#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda {
namespace {

__global__ void ConvertToBf16Kernel(const float* x, int64_t x_stride, int rows, int cols, int cols_padded,
                                    __nv_bfloat16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * cols_padded) return;
  const int64_t r = i / cols_padded, c = i % cols_padded;
  out[i] = __float2bfloat16_rn(c < cols ? x[r * x_stride + c] : 0.0f);
}

// The same conversion, eight columns a thread (two 16-byte loads, one 16-byte store) and 32-bit
// index arithmetic, for 16-byte aligned rows; the tail of a row past `cols` is zeros.
// Launched as a programmatic dependent (decode, up to 64 rows), it starts while the row kernel
// ahead drains and lets the GEMM after it in at once, so that GEMM's first weight stages stream
// during the conversion; both wait for their inputs in GridDependencyWait.
__global__ void ConvertToBf16x8Kernel(const float* x, int64_t x_stride, int rows, int cols, int cols_padded,
                                      __nv_bfloat16* out) {
  AllowDependentLaunch();
  GridDependencyWait();
  const uint32_t chunks = static_cast<uint32_t>(cols_padded) / 8;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= static_cast<uint32_t>(rows) * chunks) return;
  const uint32_t r = i / chunks, c = (i - r * chunks) * 8;
  const float* src = x + r * x_stride + c;
  float v[8];
  if (static_cast<int>(c) + 8 <= cols) {
    const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = static_cast<int>(c) + j < cols ? src[j] : 0.0f;
  }
  __align__(16) __nv_bfloat16 b[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) b[j] = __float2bfloat16_rn(v[j]);
  *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * cols_padded + c) = *reinterpret_cast<const uint4*>(b);
}

}  // namespace

void ConvertToBf16(const float* x, int64_t x_stride, int64_t rows, int64_t cols, int64_t cols_padded, uint16_t* out,
                   cudaStream_t stream, bool pdl) {
  const int64_t total = rows * cols_padded;
  if (total == 0) return;
  if (Aligned16(x) && Aligned16(out) && x_stride % 4 == 0 && cols_padded % 8 == 0 && total / 8 < (int64_t{1} << 31)) {
    const int64_t threads = total / 8;
    LaunchDependent(ConvertToBf16x8Kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0, stream, pdl,
                    x, x_stride, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(cols_padded),
                    reinterpret_cast<__nv_bfloat16*>(out));
    return;
  }
  ConvertToBf16Kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      x, x_stride, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(cols_padded),
      reinterpret_cast<__nv_bfloat16*>(out));
  PAGODA_CUDA_CHECK_LAUNCH("ConvertToBf16Kernel");
}

}  // namespace pagoda::cuda
