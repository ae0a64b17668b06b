#include "kernels/cuda/attention_inputs.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;

// A row rounded to the cache's element type into its slot, by the threads first, first +
// kStride, ...
template <typename T, int kStride = kThreads>
__device__ inline void StorePlainRow(const float* row, void* cache, int64_t slot, int64_t width, int64_t head, int d,
                                     int first = threadIdx.x) {
  T* out = static_cast<T*>(cache) + slot * width + head * d;
  for (int i = first; i < d; i += kStride) out[i] = FromFloat<T>(row[i]);
}

// Rows (heads) a block handles for one token in a step of at least kGroupedFrom tokens: the
// token's RoPE cos/sin computed once for them, a few blocks a token rather than one per row
// (H200, Llama-3-8B, 4096-token prefill: 237 -> 176 us a layer). Fewer tokens (decode), one row
// a block: the rows of a block are handled one after another, and with few tokens that chain is
// the step's latency (batch 1: 12 -> 16 us a layer with 8 rows a block).
constexpr int kRowsPerBlock = 8;
constexpr int64_t kGroupedFrom = 256;

// Row h of a token: h < num_heads: query head h; then the KV heads' K rows, then their V rows.
struct RowRef {
  int kind;  // 0 q, 1 k, 2 v
  int64_t head;
};
__device__ inline RowRef RefOf(const AttentionInputsParams& p, int64_t h) {
  const int64_t hq = p.num_heads, hk = p.num_kv_heads;
  const int kind = h < hq ? 0 : h < hq + hk ? 1 : 2;
  return {kind, kind == 0 ? h : kind == 1 ? h - hq : h - hq - hk};
}

// Row `ref` of token t biased into `row` (shared), then RoPE on q and k, by the threads
// first, first + kStride, ...; sync() between the phases (the block's barrier or the warp's).
template <int kStride, typename Sync>
__device__ void BiasAndRotate(const AttentionInputsParams& p, int64_t t, RowRef ref, float* row, const float* cos_sin,
                              int first, Sync sync) {
  const int d = static_cast<int>(p.head_dim);
  const float* src = ref.kind == 0   ? p.src_q + t * p.src_q_stride
                     : ref.kind == 1 ? p.src_k + t * p.src_k_stride
                                     : p.src_v + t * p.src_v_stride;
  const float* bias = ref.kind == 0 ? p.bq : ref.kind == 1 ? p.bk : p.bv;
  src += ref.head * d;
#pragma unroll 4
  for (int i = first; i < d; i += kStride) row[i] = bias != nullptr ? __fadd_rn(src[i], bias[ref.head * d + i]) : src[i];
  sync();
  if (ref.kind < 2 && p.rope_dim > 0) {
    const int half = static_cast<int>(p.rope_dim / 2);
#pragma unroll 2
    for (int j = first; j < half; j += kStride) {
      const float c = cos_sin[2 * j], s = cos_sin[2 * j + 1];
      const int i0 = p.interleaved ? 2 * j : j;
      const int i1 = p.interleaved ? 2 * j + 1 : j + half;
      const float a = row[i0], b = row[i1];
      row[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      row[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
    sync();
  }
}

// One row of token t, a block for it: `row` (shared) holds it while it is biased, rotated and
// stored.
__device__ void WriteRow(const AttentionInputsParams& p, int64_t t, int64_t h, float* row, const float* cos_sin) {
  const RowRef ref = RefOf(p, h);
  const int kind = ref.kind;
  const int64_t head = ref.head, hq = p.num_heads, hk = p.num_kv_heads;
  const int d = static_cast<int>(p.head_dim);
  BiasAndRotate<kThreads>(p, t, ref, row, cos_sin, threadIdx.x, [] { __syncthreads(); });
  if (kind == 0) {
    float* out = p.q + t * hq * d + head * d;
    for (int i = threadIdx.x; i < d; i += kThreads) out[i] = row[i];
    return;
  }
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;  // the same for the whole block
  const KVArrayFormat& f = kind == 1 ? p.k_format : p.v_format;
  void* cache = kind == 1 ? p.k_cache : p.v_cache;
  switch (f.quant) {
    case KVQuant::kNone:
      switch (p.dtype) {
        case DType::kF32: StorePlainRow<float>(row, cache, slot, hk * d, head, d); break;
        case DType::kBF16: StorePlainRow<__nv_bfloat16>(row, cache, slot, hk * d, head, d); break;
        default: StorePlainRow<__half>(row, cache, slot, hk * d, head, d); break;
      }
      return;
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2:
    case KVQuant::kInt8:
    case KVQuant::kInt4:
    case KVQuant::kNvfp4: {
      uint8_t* out = static_cast<uint8_t*>(cache) + DeviceKVRowIndex(slot, head, hk, f.block_size) * DeviceKVRowBytes(f);
      if (f.quant == KVQuant::kFp8E4M3) {
        QuantizeFp8Row<Fp8E4M3Row>(row, out, d, f.tensor_scale);
      } else if (f.quant == KVQuant::kFp8E5M2) {
        QuantizeFp8Row<Fp8E5M2Row>(row, out, d, f.tensor_scale);
      } else if (f.quant == KVQuant::kInt8) {
        QuantizeInt8Row(row, out, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim));
      } else if (f.quant == KVQuant::kInt4) {
        QuantizeInt4Row(row, out, d, static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim));
      } else {
        QuantizeNvfp4Row(row, out, d, f.tensor_scale);
      }
      return;
    }
    default: return;  // refused on the host
  }
}

// Token t's RoPE (cos, sin) pairs into `cos_sin` (shared) by the block, when its rows from h0
// include a q or k row (the angle in float64, rounded to f32 after the magnitude).
__device__ void TokenCosSin(const AttentionInputsParams& p, int64_t t, int64_t h0, float* cos_sin) {
  if (p.rope_dim <= 0 || h0 >= p.num_heads + p.num_kv_heads) return;
  const int half = static_cast<int>(p.rope_dim / 2);
  for (int j = threadIdx.x; j < half; j += kThreads) {
    const double angle = static_cast<double>(p.positions[t]) * p.inv_freq[j];
    cos_sin[2 * j] = static_cast<float>(cos(angle) * p.magnitude);
    cos_sin[2 * j + 1] = static_cast<float>(sin(angle) * p.magnitude);
  }
}

// Block (token blockIdx.x, rows rows_per_block * blockIdx.y ...).
__global__ void __launch_bounds__(kThreads) AttentionInputsKernel(AttentionInputsParams p, int rows_per_block) {
  AllowDependentLaunch();  // FlashAttention after it reads the step's positions and tables meanwhile
  GridDependencyWait();  // q|k|v from the GEMM ahead
  __shared__ float row[kMaxKVQuantDim];
  __shared__ float cos_sin[kMaxKVQuantDim];  // (cos, sin) of each rotated pair
  const int64_t t = blockIdx.x;
  const int64_t rows = p.num_heads + 2 * p.num_kv_heads;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t h1 = h0 + rows_per_block < rows ? h0 + rows_per_block : rows;
  TokenCosSin(p, t, h0, cos_sin);
  for (int64_t h = h0; h < h1; ++h) {
    __syncthreads();  // the previous row (and the cos/sin) done with
    WriteRow(p, t, h, row, cos_sin);
  }
}

// Unquantized caches (and q): one warp a row, the block's four warps on different rows at once
// (no block-wide barrier between a row's phases), the same operations as WriteRow.
constexpr int kWarps = kThreads / 32;
__device__ void WarpRow(const AttentionInputsParams& p, int64_t t, int64_t h, float* row, const float* cos_sin) {
  const int lane = threadIdx.x & 31;
  const RowRef ref = RefOf(p, h);
  const int kind = ref.kind;
  const int64_t head = ref.head, hq = p.num_heads, hk = p.num_kv_heads;
  const int d = static_cast<int>(p.head_dim);
  BiasAndRotate<32>(p, t, ref, row, cos_sin, lane, [] { __syncwarp(); });
  if (kind == 0) {
    float* out = p.q + t * hq * d + head * d;
#pragma unroll 4
    for (int i = lane; i < d; i += 32) out[i] = row[i];
  } else {
    const int64_t slot = p.slot_mapping[t];
    if (slot >= 0) {
      void* cache = kind == 1 ? p.k_cache : p.v_cache;
      switch (p.dtype) {
        case DType::kF32: StorePlainRow<float, 32>(row, cache, slot, hk * d, head, d, lane); break;
        case DType::kBF16: StorePlainRow<__nv_bfloat16, 32>(row, cache, slot, hk * d, head, d, lane); break;
        default: StorePlainRow<__half, 32>(row, cache, slot, hk * d, head, d, lane); break;
      }
    }
  }
  __syncwarp();  // the row buffer is read before the warp's next row overwrites it
}

__global__ void __launch_bounds__(kThreads) AttentionInputsWarpKernel(AttentionInputsParams p, int rows_per_block) {
  AllowDependentLaunch();  // FlashAttention after it reads the step's positions and tables meanwhile
  GridDependencyWait();  // q|k|v from the GEMM ahead
  __shared__ float rows_s[kWarps][kMaxKVQuantDim];
  __shared__ float cos_sin[kMaxKVQuantDim];
  const int64_t t = blockIdx.x;
  const int64_t rows = p.num_heads + 2 * p.num_kv_heads;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t h1 = h0 + rows_per_block < rows ? h0 + rows_per_block : rows;
  TokenCosSin(p, t, h0, cos_sin);
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  for (int64_t h = h0 + warp; h < h1; h += kWarps) WarpRow(p, t, h, rows_s[warp], cos_sin);
}

}  // namespace

void WriteAttentionInputs(const AttentionInputsParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(p.head_dim > 0 && p.head_dim <= kMaxKVQuantDim && p.rope_dim <= p.head_dim)
      << "WriteAttentionInputs: head_dim " << p.head_dim << ", rope dim " << p.rope_dim;
  PAGODA_CHECK(p.k_format.quant == p.v_format.quant) << "WriteAttentionInputs: K and V in different formats";
  PAGODA_CHECK(p.k_format.quant == KVQuant::kNone || p.k_format.quant == KVQuant::kFp8E4M3 ||
               p.k_format.quant == KVQuant::kFp8E5M2 || p.k_format.quant == KVQuant::kInt8 ||
               p.k_format.quant == KVQuant::kInt4 || p.k_format.quant == KVQuant::kNvfp4)
      << "WriteAttentionInputs: KV format " << KVQuantName(p.k_format.quant);
  PAGODA_CHECK(p.k_format.quant != KVQuant::kNone || p.dtype == DType::kF32 || p.dtype == DType::kBF16 ||
               p.dtype == DType::kF16)
      << "WriteAttentionInputs: KV element type " << DTypeName(p.dtype);
  // Unquantized: a warp a row, a block's four warps on one row each (a short chain: decode) or
  // two (kGroupedFrom tokens and more: the cos/sin shared by eight rows). Quantized rows (the
  // quantizers reduce over the block): a block a row, or kRowsPerBlock one after another.
  const bool warp_rows = p.k_format.quant == KVQuant::kNone;
  const int rows_per_block =
      warp_rows ? (p.num_tokens >= kGroupedFrom ? 2 * kWarps : kWarps) : p.num_tokens >= kGroupedFrom ? kRowsPerBlock : 1;
  const int64_t row_groups = (p.num_heads + 2 * p.num_kv_heads + rows_per_block - 1) / rows_per_block;
  PAGODA_CHECK(p.num_tokens <= 2147483647 && row_groups <= 65535) << "WriteAttentionInputs: grid too large";
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(row_groups));
  if (warp_rows) {
    LaunchDependent(AttentionInputsWarpKernel, grid, dim3(kThreads), 0, stream, pdl, p, rows_per_block);
    return;
  }
  LaunchDependent(AttentionInputsKernel, grid, dim3(kThreads), 0, stream, pdl, p, rows_per_block);
}

}  // namespace pagoda::cuda
