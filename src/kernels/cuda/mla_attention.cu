#include "kernels/cuda/mla_attention.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 8;  // kv_lora_rank <= 1024

template <typename T>
__global__ void MlaAttentionKernel(MlaAttentionParams p) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int rank = static_cast<int>(p.kv_lora_rank), rope = static_cast<int>(p.rope_dim);
  extern __shared__ float smem[];
  float* q = smem;                      // [rank + rope]
  float* scores = smem + rank + rope;   // [kThreads]
  const float* q_row = p.q + (t * p.num_heads + h) * (rank + rope);
  for (int d = threadIdx.x; d < rank + rope; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  const T* latent = static_cast<const T*>(p.latent_cache);
  const T* rope_k = static_cast<const T*>(p.rope_cache);
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  __shared__ int64_t slots[kThreads];
  for (int64_t k0 = 0; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t kp = k0 + threadIdx.x;
      const int64_t slot = static_cast<int64_t>(table[kp / p.block_size]) * p.block_size + kp % p.block_size;
      slots[threadIdx.x] = slot;
      const T* c = latent + slot * rank;
      const T* pe = rope_k + slot * rope;
      float dot = 0.0f;
      for (int d = 0; d < rank; ++d) dot += q[d] * ToFloat(c[d]);
      float dot_pe = 0.0f;
      for (int d = 0; d < rope; ++d) dot_pe += q[rank + d] * ToFloat(pe[d]);
      scores[threadIdx.x] = p.scale * (dot + dot_pe);
    }
    __syncthreads();
    state.AddTile(scores, n, rank, [&](int j, int d) { return ToFloat(latent[slots[j] * rank + d]); });
  }
  state.Store(p.out + (t * p.num_heads + h) * rank, rank);
}

}  // namespace

void MlaAttention(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.kv_lora_rank <= kThreads * kMaxPerThread) << "CUDA MlaAttention: kv_lora_rank " << p.kv_lora_rank;
  PAGODA_CHECK(p.num_heads <= 65535) << "CUDA MlaAttention: too many heads";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.kv_lora_rank + p.rope_dim + kThreads) * sizeof(float);
  switch (p.kv_dtype) {
    case DType::kF32: MlaAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kBF16: MlaAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kF16: MlaAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p); break;
    default: ThrowUnsupported("CUDA MlaAttention: KV element type " + std::string(DTypeName(p.kv_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("MlaAttentionKernel");
}

}  // namespace pagoda::cuda
