#include "kernels/cuda/kv_wide.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"

namespace pagoda::cuda {
namespace {

template <typename T>
__global__ void WriteWideKernel(KVWideWriteParams p) {
  const int64_t t = blockIdx.y;
  const int64_t row = p.wide_rows[t];
  if (row < 0) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < p.k_width) static_cast<T*>(p.k_wide)[row * p.k_width + i] = FromFloat<T>(p.k[t * p.k_stride + i]);
  if (i < p.v_width) static_cast<T*>(p.v_wide)[row * p.v_width + i] = FromFloat<T>(p.v[t * p.v_stride + i]);
}

// Block (token t, head h): threads own bytes of the codes (four channels each) and walk the
// block's rows for them: min and max, the stored scale and min, then the codes of every row.
template <typename T>
__global__ void Kivi2KeysKernel(Kivi2KeysParams p) {
  const int64_t t = blockIdx.x;
  const int32_t block = p.fill_blocks[t];
  if (block < 0) return;
  const KVArrayFormat& f = p.k_format;
  const int64_t h = blockIdx.y, d = f.head_dim, heads = f.num_heads, bs = f.block_size;
  const T* wide = static_cast<const T*>(p.k_wide) + static_cast<int64_t>(p.wide_index[block]) * bs * heads * d;
  uint8_t* out = static_cast<uint8_t*>(p.k_cache) + block * p.k_block_bytes;
  uint8_t* codes = out + heads * d * 4 + h * bs * (d / 4);
  for (int64_t b = threadIdx.x; b < d / 4; b += blockDim.x) {
    float lo[4], hi[4], mn[4], inv[4];
    for (int k = 0; k < 4; ++k) {
      lo[k] = INFINITY;
      hi[k] = -INFINITY;
    }
    for (int64_t o = 0; o < bs; ++o) {
      for (int k = 0; k < 4; ++k) {
        const float x = ToFloat(wide[(o * heads + h) * d + 4 * b + k]);
        lo[k] = fminf(lo[k], x);
        hi[k] = fmaxf(hi[k], x);
      }
    }
    for (int k = 0; k < 4; ++k) {
      const int64_t c = 4 * b + k;
      const __half s = __float2half_rn(fminf(__fdiv_rn(__fsub_rn(hi[k], lo[k]), 3.0f), 65504.0f));
      const __half m = __float2half_rn(fminf(lo[k], 65504.0f));
      *reinterpret_cast<unsigned short*>(out + (h * d + c) * 4) = __half_as_ushort(s);
      *reinterpret_cast<unsigned short*>(out + (h * d + c) * 4 + 2) = __half_as_ushort(m);
      const float sf = __half2float(s);
      mn[k] = __half2float(m);
      inv[k] = sf > 0.0f ? __fdiv_rn(1.0f, sf) : 0.0f;
    }
    for (int64_t o = 0; o < bs; ++o) {
      uint32_t byte = 0;
      for (int k = 0; k < 4; ++k) {
        const float x = ToFloat(wide[(o * heads + h) * d + 4 * b + k]);
        const float q = fminf(fmaxf(rintf(__fmul_rn(__fsub_rn(x, mn[k]), inv[k])), 0.0f), 3.0f);
        byte |= static_cast<uint32_t>(q) << (2 * k);
      }
      codes[o * (d / 4) + b] = static_cast<uint8_t>(byte);
    }
  }
}

}  // namespace

void WriteWideRows(const KVWideWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.num_tokens <= 65535) << "WriteWideRows: more than 65535 tokens in one launch";
  const int64_t width = p.k_width > p.v_width ? p.k_width : p.v_width;
  const dim3 grid(static_cast<unsigned>((width + 127) / 128), static_cast<unsigned>(p.num_tokens));
  switch (p.dtype) {
    case DType::kF32: WriteWideKernel<float><<<grid, 128, 0, stream>>>(p); break;
    case DType::kBF16: WriteWideKernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p); break;
    case DType::kF16: WriteWideKernel<__half><<<grid, 128, 0, stream>>>(p); break;
    default: ThrowUnsupported("CUDA WriteWideRows: KV element type " + std::string(DTypeName(p.dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("WriteWideKernel");
}

void QuantizeFilledKivi2Keys(const Kivi2KeysParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.k_format.quant == KVQuant::kKivi2 && p.k_format.per_channel && p.k_format.head_dim % 8 == 0)
      << "QuantizeFilledKivi2Keys: not a kivi2 key array of head dim a multiple of 8";
  PAGODA_CHECK(p.num_tokens <= 2147483647) << "QuantizeFilledKivi2Keys: too many tokens in one launch";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.k_format.num_heads));
  switch (p.dtype) {
    case DType::kF32: Kivi2KeysKernel<float><<<grid, 32, 0, stream>>>(p); break;
    case DType::kBF16: Kivi2KeysKernel<__nv_bfloat16><<<grid, 32, 0, stream>>>(p); break;
    case DType::kF16: Kivi2KeysKernel<__half><<<grid, 32, 0, stream>>>(p); break;
    default: ThrowUnsupported("CUDA QuantizeFilledKivi2Keys: KV element type " + std::string(DTypeName(p.dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("Kivi2KeysKernel");
}

}  // namespace pagoda::cuda
