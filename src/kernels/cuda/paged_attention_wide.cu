// Paged attention over a quantized cache with the wide side pool (kernels/cuda/paged_attention.h:
// PagedAttentionWide): kivi2, and any per-token format with --kv-sink-tokens or
// --kv-recent-tokens. Each key is read where the CPU's KVReader reads it (kernels/cpu/attention.cc):
// its block's wide copy for positions < sink_tokens and, in the query's own block, for keys within
// recent_tokens of the query (all of them with own_block_wide, kivi2's residual); else its codes,
// dequantized one value at a time as kv/kv_codec.cc does (DequantizeBlockValue). One thread block
// per (token, query head) over tiles of 128 keys and an online softmax: simple and exact, not fast
// (every query head of a group reads the group's K/V rows again).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kv/kv_codec.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= 512

template <typename W>
__global__ void __launch_bounds__(kThreads) WideAttentionKernel(PagedAttentionParams p, int64_t k_block_bytes,
                                                                int64_t v_block_bytes) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int hd = static_cast<int>(p.head_dim);
  const int64_t kv_h = h / (p.num_heads / p.num_kv_heads);
  const int64_t bs = p.block_size;
  extern __shared__ float smem[];
  float* q = smem;            // [head_dim]
  float* scores = smem + hd;  // [kThreads]
  __shared__ const uint8_t* v_src[kThreads];  // a key's wide V row, or its V block
  __shared__ int32_t v_offset[kThreads];      // -1: wide; else the key's offset in its block
  const float* q_row = p.q + (t * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  const int64_t start = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int32_t* table = p.block_tables[t];
  const auto* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const auto* v_cache = static_cast<const uint8_t*>(p.v_cache);
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  for (int64_t k0 = start; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t key = k0 + threadIdx.x;
      const int64_t block = table[key / bs], offset = key % bs;
      const int32_t w = p.wide_index != nullptr ? p.wide_index[block] : -1;
      const bool wide = w >= 0 && (key < p.sink_tokens ||
                                   (key / bs == pos / bs && (p.own_block_wide || pos - key < p.recent_tokens)));
      float dot = 0.0f;
      if (wide) {
        const int64_t index = ((static_cast<int64_t>(w) * bs + offset) * p.num_kv_heads + kv_h) * hd;
        const W* k = static_cast<const W*>(p.k_wide) + index;
        for (int d = 0; d < hd; ++d) dot = fmaf(q[d], ToFloat(k[d]), dot);
        v_src[threadIdx.x] = reinterpret_cast<const uint8_t*>(static_cast<const W*>(p.v_wide) + index);
        v_offset[threadIdx.x] = -1;
      } else {
        const uint8_t* k = k_cache + block * k_block_bytes;
        for (int d = 0; d < hd; ++d) dot = fmaf(q[d], DequantizeBlockValue(p.k_format, k, offset, kv_h, d), dot);
        v_src[threadIdx.x] = v_cache + block * v_block_bytes;
        v_offset[threadIdx.x] = static_cast<int32_t>(offset);
      }
      scores[threadIdx.x] = dot * p.scale;
    }
    __syncthreads();
    state.AddTile(scores, n, hd, [&](int j, int d) {
      return v_offset[j] < 0 ? ToFloat(reinterpret_cast<const W*>(v_src[j])[d])
                             : DequantizeBlockValue(p.v_format, v_src[j], v_offset[j], kv_h, d);
    });
  }
  state.Store(p.out + (t * p.num_heads + h) * hd, hd);
}

}  // namespace

void PagedAttentionWide(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim <= kThreads * kMaxPerThread) << "CUDA PagedAttentionWide: head_dim " << p.head_dim;
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0 && p.num_heads <= 65535)
      << "CUDA PagedAttentionWide: head counts " << p.num_heads << "/" << p.num_kv_heads;
  PAGODA_CHECK(p.k_format.quant != KVQuant::kNone && p.v_format.quant != KVQuant::kNone &&
               p.k_format.heavy_rows == 0 && p.v_format.heavy_rows == 0)
      << "CUDA PagedAttentionWide: quantized K and V arrays without heavy rows";
  PAGODA_CHECK(p.num_tokens <= 2147483647) << "CUDA PagedAttentionWide: too many tokens in one launch";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.head_dim + kThreads) * sizeof(float);
  const int64_t kb = KVBlockBytes(p.k_format), vb = KVBlockBytes(p.v_format);
  switch (p.wide_dtype) {
    case DType::kF32: WideAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p, kb, vb); break;
    case DType::kBF16: WideAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p, kb, vb); break;
    case DType::kF16: WideAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p, kb, vb); break;
    default: ThrowUnsupported("CUDA PagedAttentionWide: wide element type " + std::string(DTypeName(p.wide_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("WideAttentionKernel");
}

}  // namespace pagoda::cuda
