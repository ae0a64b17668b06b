// Float64 reference for MatMul (kernels/cpu/matmul.h), for tests.
#pragma once

#include <cstdint>

#include "kernels/params/matmul_params.h"

namespace pagoda {

// y[t, r] = sum_k W[r, k] * x[t, k] in float64, W's values decoded exactly from its
// dtype (F32, F16, BF16, Q8_0, Q4_0) and x used as given (not quantized).
// abs_y (nullable): sum_k |W[r, k] * x[t, k]|, the scale error bounds are relative to.
// x: [num_tokens, w.cols]; y, abs_y: [num_tokens, w.rows].
void MatMulRef(const WeightMatrix& w, const float* x, int64_t num_tokens, double* y,
               double* abs_y);

}  // namespace pagoda
