#include "kernels/cuda/kv_write.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
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

}  // namespace

void WriteKV(const KVWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
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
