// y = x W^T on the CPU for every weight dtype: the GEMV (decode) and GEMM (prefill)
// behind every projection.
//
// Batch invariance: y[t, :] depends only on x[t, :] and W, never on num_tokens or the
// thread count: each output element is reduced over k in one fixed order.
//
// Kernels are chosen at run time from the CPU's features (AVX-512+VNNI, AVX2+FMA, or
// portable C++; PAGODA_MATMUL_ISA=generic|avx2|avx512 caps the choice). F32, F16 and
// BF16 weights are multiplied with f32 activations in f32 FMAs (weights widened
// exactly on the fly). Q8_0 and Q4_0 weights use integer dot products with the
// activations quantized per block of 32 to int8 (f32 scale), as llama.cpp does.
// Q4_K/Q5_K/Q6_K weights are accepted through a slow portable path (rows dequantized
// to f32), for correctness rather than speed.
// Thread safety: reentrant; runs on pagoda::NumThreads() threads.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/params/matmul_params.h"

namespace pagoda {

struct PackedWeights;  // kernels/cpu/packed_weights.h

// A weight as the CPU backend holds it: the row-major view and, optionally, the same
// weights repacked into panels (owned by whoever packed them, e.g. the CPU backend). MatMul
// uses the panels only if they were packed from this data and shape; a view that changes rows
// or data must reset `packed`.
struct CpuWeight : WeightMatrix {
  const PackedWeights* packed = nullptr;

  CpuWeight() = default;
  explicit CpuWeight(const WeightMatrix& w, const PackedWeights* p = nullptr) : WeightMatrix(w), packed(p) {}
};

// x: [num_tokens, w.cols] f32, y: [num_tokens, w.rows] f32 (y must not alias x).
// REQUIRES: w.dtype in {F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} (else throws
// Unsupported); w.cols a multiple of the dtype's block size (else throws InvalidArgument).
void MatMul(const CpuWeight& w, const float* x, int64_t num_tokens, float* y);
inline void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  MatMul(CpuWeight(w), x, num_tokens, y);
}

// What becomes of the products instead of being stored: each work item hands its block of
// y to its consumer while the block is still in cache, so the prefill's large activations do
// not make an extra round trip through memory. The results are the bits of MatMul followed
// by the separate kernel (AddInPlace, SiluMul).
struct MatMulEpilogue {
  enum class Kind {
    kAddTo,         // out[t * w.rows + r] += y[t, r] (a residual add)
    kSiluMulPairs,  // w's rows are gate and up alternating 16 at a time (StackOrder::kPairs16):
                    // out[t * w.rows / 2 + 16i + j] = silu(y[t, 32i + j]) * y[t, 32i + 16 + j]
  };
  Kind kind = Kind::kAddTo;
  float* out = nullptr;
};
// y: scratch of [num_tokens, w.rows] floats the call may use (contents unspecified after).
// REQUIRES for kSiluMulPairs: w is a packed view (PackedOnlyView) of kPairs16 panels.
void MatMul(const CpuWeight& w, const float* x, int64_t num_tokens, float* y, const MatMulEpilogue& ep);

// The kernel family MatMul uses on this machine: "avx512", "avx2" or "generic".
std::string_view MatMulIsaName();

}  // namespace pagoda
