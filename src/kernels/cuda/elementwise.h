// Row-wise elementwise kernels on f32 device arrays [rows, cols] with row strides (in
// elements). Each launch is checked (cuda_check.h); all run on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

// x[r] += y[r]
void AddRows(const float* y, int64_t y_stride, float* x, int64_t x_stride, int64_t rows, int64_t cols,
             cudaStream_t stream);
// x[r] += bias
void AddBiasRows(const float* bias, float* x, int64_t x_stride, int64_t rows, int64_t cols, cudaStream_t stream);
// out = silu(gate) * up (out may alias gate or up)
void SiluMulRows(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                 int64_t out_stride, int64_t rows, int64_t cols, cudaStream_t stream);
// gu [rows, 2 * cols] holds gate and up alternating 16 columns at a time (StackOrder::kPairs16);
// out [rows, cols] = silu(gate) * up.
// pdl: launched as a programmatic dependent of the kernel ahead (kernels/cuda/pdl.cuh).
void SiluMulPairs16(const float* gu, int64_t gu_stride, float* out, int64_t out_stride, int64_t rows, int64_t cols,
                    cudaStream_t stream, bool pdl = false);
// dst = src (no overlap)
void CopyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols,
              cudaStream_t stream);
// out[i] = x[index[i]] for i < n (index: [n] int32 device)
void GatherRows(const float* x, int64_t x_stride, const int32_t* index, int64_t n, int64_t cols, float* out,
                int64_t out_stride, cudaStream_t stream);
// The same from bf16 rows (bits), widened exactly to f32.
void GatherRowsBf16(const uint16_t* x, int64_t x_stride, const int32_t* index, int64_t n, int64_t cols, float* out,
                    int64_t out_stride, cudaStream_t stream);
// out[index[i]] = x[i] for i < n
void ScatterRows(const float* x, int64_t x_stride, const int32_t* index, int64_t n, int64_t cols, float* out,
                 int64_t out_stride, cudaStream_t stream);
// MoE combine: y[t] += sum_j weights[t, j] * routed[t * k + j], the sum over j in order first
// (kernels/cpu/moe.cc's order). routed [n * k, cols] contiguous, weights [n, k].
void MoeCombine(const float* routed, const float* weights, int64_t n, int64_t k, int64_t cols, float* y,
                int64_t y_stride, cudaStream_t stream);
// x = value (tests poison outputs with NaN)
void FillRows(float* x, int64_t x_stride, int64_t rows, int64_t cols, float value, cudaStream_t stream);

}  // namespace pagoda::cuda
