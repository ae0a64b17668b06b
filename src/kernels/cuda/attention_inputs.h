// A Llama-family layer's attention inputs in one launch (Backend::WriteAttentionInputs on the
// GPU): per (token, head) row, q / k / v read from their sources (the stacked q|k|v product's
// columns), the bias added, RoPE applied to q and k (the angle and cos/sin in float64, rounded
// to f32, then the f32 rotation, as kernels/cuda/rope.cu), q written out, k and v written into
// the token's cache slot: converted to the cache's element type, or quantized per row (fp8,
// int8: kernels/cuda/kv_codec.cuh). The same operations in the same order as the separate
// Copy, AddBias, Rope and WriteKV kernels, so the same bits, in one launch instead of six to nine.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kv/kv_format.h"

namespace pagoda::cuda {

struct AttentionInputsParams {
  const float* src_q = nullptr;  // [num_tokens, num_heads * head_dim] f32, row stride src_q_stride
  const float* src_k = nullptr;  // [num_tokens, num_kv_heads * head_dim]
  const float* src_v = nullptr;
  int64_t src_q_stride = 0, src_k_stride = 0, src_v_stride = 0;
  const float* bq = nullptr;  // [num_heads * head_dim]; null: no bias
  const float* bk = nullptr;
  const float* bv = nullptr;
  float* q = nullptr;  // [num_tokens, num_heads * head_dim] contiguous: the rotated queries
  int64_t num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  // RoPE on dims [0, rope_dim) of each q and k head.
  const int32_t* positions = nullptr;  // [num_tokens]
  const double* inv_freq = nullptr;    // [rope_dim / 2]
  int64_t rope_dim = 0;
  bool interleaved = true;
  double magnitude = 1.0;
  // The cache: slot_mapping [num_tokens] (negative: skipped); plain rows of `dtype` or
  // quantized rows of k_format / v_format.
  const int64_t* slot_mapping = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType dtype = DType::kBF16;
  KVArrayFormat k_format, v_format;
};

// REQUIRES: head_dim <= kMaxKVQuantDim (512); k_format and v_format both plain or both fp8/int8.
// pdl: launched as a programmatic dependent of the kernel ahead (kernels/cuda/pdl.cuh).
void WriteAttentionInputs(const AttentionInputsParams& p, cudaStream_t stream, bool pdl = false);

}  // namespace pagoda::cuda
