// Normalization and activation kernels.
#pragma once

#include <cstdint>

namespace pagoda {

// Elementwise loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load
// (GCC target_clones), without floating-point contraction: every level gives the same bits.

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for rows of n values. The sum of
// squares is accumulated in double in 8 lanes (lane = index mod 8), then the lanes in a
// fixed tree and the tail in order. y may alias x.
void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, double eps, float* y);

// out[i] = silu(gate[i]) * up[i]; out may alias gate. exp is the vectorized one of the
// attention step (attention_tile.h; < 1 ulp), at the MatMul's ISA level.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// Rows of a fused gate|up projection: out[r, i] = silu(gu[r, i]) * gu[r, n + i] for
// gu: [rows, 2n], out: [rows, n].
void SiluMulRows(const float* gu, int64_t rows, int64_t n, float* out);

// x[i] += h[i] for i < n (residual adds).
void AddInPlace(const float* h, int64_t n, float* x);

// The single-threaded loops behind SiluMul and AddInPlace, for callers that already run on
// every thread (MatMul's fused epilogues): the same bits.
void SiluMulRun(const float* gate, const float* up, int64_t n, float* out);
void AddInPlaceRun(const float* h, int64_t n, float* x);

}  // namespace pagoda
