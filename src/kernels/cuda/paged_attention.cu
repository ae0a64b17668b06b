#include "kernels/cuda/paged_attention.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= 512

template <typename T>
__global__ void PagedAttentionKernel(PagedAttentionParams p) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int hd = static_cast<int>(p.head_dim);
  const int64_t kv_h = h / (p.num_heads / p.num_kv_heads);
  extern __shared__ float smem[];
  float* q = smem;              // [head_dim]
  float* scores = smem + hd;    // [kThreads]
  const float* q_row = p.q + (t * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) q[d] = q_row[d];
  __syncthreads();

  const int64_t pos = p.positions[t];
  // AttentionWindowStart (attention_params.h), which is host-only.
  const int64_t start = p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? pos - p.sliding_window + 1 : 0;
  const int32_t* table = p.block_tables[t];
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  const int64_t row = p.num_kv_heads * hd;  // elements per slot
  auto slot_of = [&](int64_t key_pos) {
    return static_cast<int64_t>(table[key_pos / p.block_size]) * p.block_size + key_pos % p.block_size;
  };
  OnlineSoftmax<kThreads, kMaxPerThread> state;
  __shared__ int64_t slots[kThreads];
  for (int64_t k0 = start; k0 <= pos; k0 += kThreads) {
    const int n = static_cast<int>(pos + 1 - k0 < kThreads ? pos + 1 - k0 : kThreads);
    if (threadIdx.x < n) {
      const int64_t slot = slot_of(k0 + threadIdx.x);
      slots[threadIdx.x] = slot;
      const T* k = k_cache + slot * row + kv_h * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q[d] * ToFloat(k[d]);
      scores[threadIdx.x] = dot * p.scale;
    }
    __syncthreads();
    state.AddTile(scores, n, hd, [&](int j, int d) { return ToFloat(v_cache[slots[j] * row + kv_h * hd + d]); });
  }
  state.Store(p.out + (t * p.num_heads + h) * hd, hd);
}

}  // namespace

void PagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim <= kThreads * kMaxPerThread) << "CUDA PagedAttention: head_dim " << p.head_dim << " > 512";
  PAGODA_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0) << "CUDA PagedAttention: head counts";
  PAGODA_CHECK(p.num_heads <= 65535) << "CUDA PagedAttention: too many heads";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const size_t smem = (p.head_dim + kThreads) * sizeof(float);
  switch (p.kv_dtype) {
    case DType::kF32: PagedAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kBF16: PagedAttentionKernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(p); break;
    case DType::kF16: PagedAttentionKernel<__half><<<grid, kThreads, smem, stream>>>(p); break;
    default: ThrowUnsupported("CUDA PagedAttention: KV element type " + std::string(DTypeName(p.kv_dtype)));
  }
  PAGODA_CUDA_CHECK_LAUNCH("PagedAttentionKernel");
}

}  // namespace pagoda::cuda
