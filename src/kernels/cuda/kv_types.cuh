// The element types of an unquantized KV cache on the device (f32, bf16, f16) and their
// conversions, shared by the KV write and the attention kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pagoda::cuda {

template <typename T>
__device__ inline T FromFloat(float x);
template <>
__device__ inline float FromFloat<float>(float x) { return x; }
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline __half FromFloat<__half>(float x) { return __float2half_rn(x); }

__device__ inline float ToFloat(float x) { return x; }
__device__ inline float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float ToFloat(__half x) { return __half2float(x); }

}  // namespace pagoda::cuda
