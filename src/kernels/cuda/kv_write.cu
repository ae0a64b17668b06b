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

// Block (token t, row r): rows [0, K heads) of K, then the V heads.
__global__ void QuantizeKVKernel(KVWriteParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const bool value = blockIdx.y >= p.k_format.num_heads;
  const KVArrayFormat& f = value ? p.v_format : p.k_format;
  if (f.per_channel) return;  // kivi2 keys: quantized per block once it is full (kv_wide.h)
  const int64_t head = value ? blockIdx.y - p.k_format.num_heads : blockIdx.y;
  const int d = static_cast<int>(f.head_dim);
  const float* x = (value ? p.v + t * p.v_stride : p.k + t * p.k_stride) + head * d;
  uint8_t* row = static_cast<uint8_t*>(value ? p.v_cache : p.k_cache) + DeviceKVRowIndex(slot, head, f.num_heads, f.block_size) * DeviceKVRowBytes(f);
  switch (f.quant) {
    case KVQuant::kFp8E4M3: QuantizeFp8Row<Fp8E4M3Row>(x, row, d, f.tensor_scale); break;
    case KVQuant::kFp8E5M2: QuantizeFp8Row<Fp8E5M2Row>(x, row, d, f.tensor_scale); break;
    case KVQuant::kInt8: QuantizeInt8Row(x, row, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim)); break;
    case KVQuant::kInt4: QuantizeInt4Row(x, row, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim)); break;
    case KVQuant::kNvfp4: QuantizeNvfp4Row(x, row, d, f.tensor_scale); break;
    case KVQuant::kKivi2: QuantizeKivi2Row(x, row, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim)); break;
    default: break;  // refused on the host
  }
}

bool Supported(const KVArrayFormat& f) {
  return f.quant == KVQuant::kFp8E4M3 || f.quant == KVQuant::kFp8E5M2 || f.quant == KVQuant::kInt8 ||
         f.quant == KVQuant::kInt4 || f.quant == KVQuant::kNvfp4 || (f.quant == KVQuant::kKivi2 && f.head_dim % 8 == 0);
}

}  // namespace

void WriteKV(const KVWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  const bool k_quant = p.k_format.quant != KVQuant::kNone, v_quant = p.v_format.quant != KVQuant::kNone;
  if (k_quant || v_quant) {
    // One array quantized, the other plain (MLA's k_pe) is not a shape the backend makes.
    PAGODA_CHECK(k_quant && v_quant && Supported(p.k_format) && Supported(p.v_format))
        << "CUDA WriteKV: KV formats " << KVQuantName(p.k_format.quant) << "/" << KVQuantName(p.v_format.quant);
    PAGODA_CHECK(p.k_format.head_dim <= kMaxKVQuantDim && p.v_format.head_dim <= kMaxKVQuantDim &&
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
