#include "kernels/cuda/kv_write.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"

namespace pagoda::cuda {
namespace {

template <typename T>
__global__ void WriteKVKernel(KVWriteParams p) {
  const int64_t t = blockIdx.y;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < p.k_width) static_cast<T*>(p.k_cache)[slot * p.k_width + i] = FromFloat<T>(p.k[t * p.k_stride + i]);
  if (i < p.v_width) static_cast<T*>(p.v_cache)[slot * p.v_width + i] = FromFloat<T>(p.v[t * p.v_stride + i]);
}

constexpr int kQuantThreads = 128;
constexpr int kMaxQuantDim = 512;  // head_dim: at most 4 values a thread

// The absolute maximum as ordered int bits (non-negative floats order as their bits); NaN is
// skipped, as std::max skips it on the CPU.
__device__ __forceinline__ void MaxAbs(int* slot, float x) {
  const float a = fabsf(x);
  if (!isnan(a)) atomicMax(slot, __float_as_int(a));
}

// One (token, head) row x [d] into `row`, by the block's threads (kv/kv_codec.cc's QuantizeFp8).
template <typename Tag>
__device__ void QuantizeFp8Row(const float* x, uint8_t* row, int d, float tensor_scale) {
  __shared__ int amax_bits;
  if (threadIdx.x == 0) amax_bits = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) MaxAbs(&amax_bits, x[i]);
  __syncthreads();
  constexpr float kMax = KVRowTraits<Tag>::kMax;
  float scale = tensor_scale > 0.0f ? tensor_scale : __fdiv_rn(__int_as_float(amax_bits), kMax);
  if (!(scale > 0.0f) || isinf(scale)) scale = scale > 0.0f ? __fdiv_rn(3.0e38f, kMax) : 1.0f;
  const float inv = __fdiv_rn(1.0f, scale);
  for (int i = threadIdx.x; i < d; i += blockDim.x) row[i] = FloatToFp8(__fmul_rn(x[i], inv), Tag{});
  if (threadIdx.x < 4) row[d + threadIdx.x] = static_cast<uint8_t>(__float_as_uint(scale) >> (8 * threadIdx.x));
}

// kv/kv_codec.cc's QuantizeInt for int8: symmetric codes, one f16 scale per group of g values.
// REQUIRES: d even (the scales 2-byte aligned).
__device__ void QuantizeInt8Row(const float* x, uint8_t* row, int d, int g) {
  __shared__ int amax_bits[kMaxQuantDim];
  __shared__ float scales[kMaxQuantDim];
  const int groups = (d + g - 1) / g;
  for (int j = threadIdx.x; j < groups; j += blockDim.x) amax_bits[j] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) MaxAbs(&amax_bits[i / g], x[i]);
  __syncthreads();
  for (int j = threadIdx.x; j < groups; j += blockDim.x) {
    const __half h = __float2half_rn(fminf(__fdiv_rn(__int_as_float(amax_bits[j]), 127.0f), 65504.0f));
    // One 16-bit store (rows and head dims are even), as the f16 cache's write does: two byte
    // stores of the halves came out with a zero low byte on the H200 (sm_90a, CUDA 13).
    *reinterpret_cast<unsigned short*>(row + d + 2 * j) = __half_as_ushort(h);
    scales[j] = __half2float(h);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float s = scales[i / g];
    const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
    const float q = fminf(fmaxf(rintf(__fmul_rn(x[i], inv)), -127.0f), 127.0f);
    row[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// Block (token t, row r): rows [0, K heads) of K, then the V heads.
__global__ void QuantizeKVKernel(KVWriteParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const bool value = blockIdx.y >= p.k_format.num_heads;
  const KVArrayFormat& f = value ? p.v_format : p.k_format;
  const int64_t head = value ? blockIdx.y - p.k_format.num_heads : blockIdx.y;
  const int d = static_cast<int>(f.head_dim);
  const float* x = (value ? p.v + t * p.v_stride : p.k + t * p.k_stride) + head * d;
  uint8_t* row = static_cast<uint8_t*>(value ? p.v_cache : p.k_cache) + (slot * f.num_heads + head) * DeviceKVRowBytes(f);
  switch (f.quant) {
    case KVQuant::kFp8E4M3: QuantizeFp8Row<Fp8E4M3Row>(x, row, d, f.tensor_scale); break;
    case KVQuant::kFp8E5M2: QuantizeFp8Row<Fp8E5M2Row>(x, row, d, f.tensor_scale); break;
    case KVQuant::kInt8: QuantizeInt8Row(x, row, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim)); break;
    default: break;  // refused on the host
  }
}

bool Supported(const KVArrayFormat& f) {
  return f.quant == KVQuant::kFp8E4M3 || f.quant == KVQuant::kFp8E5M2 || f.quant == KVQuant::kInt8;
}

}  // namespace

void WriteKV(const KVWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  const bool k_quant = p.k_format.quant != KVQuant::kNone, v_quant = p.v_format.quant != KVQuant::kNone;
  if (k_quant || v_quant) {
    // One array quantized, the other plain (MLA's k_pe) is not a shape the backend makes.
    PAGODA_CHECK(k_quant && v_quant && Supported(p.k_format) && Supported(p.v_format))
        << "CUDA WriteKV: KV formats " << KVQuantName(p.k_format.quant) << "/" << KVQuantName(p.v_format.quant);
    PAGODA_CHECK(p.k_format.head_dim <= kMaxQuantDim && p.v_format.head_dim <= kMaxQuantDim &&
                 p.k_format.num_heads * p.k_format.head_dim == p.k_width &&
                 p.v_format.num_heads * p.v_format.head_dim == p.v_width)
        << "CUDA WriteKV: quantized rows of " << p.k_format.head_dim << "/" << p.v_format.head_dim << " values";
    PAGODA_CHECK(p.num_tokens <= 2147483647) << "WriteKV: too many tokens in one launch";
    const dim3 grid(static_cast<unsigned>(p.num_tokens),
                    static_cast<unsigned>(p.k_format.num_heads + p.v_format.num_heads));
    QuantizeKVKernel<<<grid, kQuantThreads, 0, stream>>>(p);
    PAGODA_CUDA_CHECK_LAUNCH("QuantizeKVKernel");
    return;
  }
  PAGODA_CHECK(p.num_tokens <= 65535) << "WriteKV: more than 65535 tokens in one launch";
  const int64_t width = p.k_width > p.v_width ? p.k_width : p.v_width;
  const dim3 grid(static_cast<unsigned>((width + 127) / 128), static_cast<unsigned>(p.num_tokens));
  switch (p.dtype) {
    case DType::kF32: WriteKVKernel<float><<<grid, 128, 0, stream>>>(p); break;
    case DType::kBF16: WriteKVKernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p); break;
    case DType::kF16: WriteKVKernel<__half><<<grid, 128, 0, stream>>>(p); break;
    default: ThrowUnsupported("CUDA WriteKV: KV element type " + std::string(DTypeName(p.dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("WriteKVKernel");
}

}  // namespace pagoda::cuda
