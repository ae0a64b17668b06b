// y = x W^T on the CPU for every weight dtype: the GEMV (decode) and GEMM (prefill)
// behind every projection.
//
// Batch invariance: y[t, :] depends only on x[t, :] and W, never on num_tokens or the
// thread count: each output element is reduced over k in one fixed order.
#pragma once

#include <cstdint>

#include "kernels/params/matmul_params.h"

namespace pagoda {

// x: [num_tokens, w.cols] f32, y: [num_tokens, w.rows] f32 (y must not alias x).
void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

}  // namespace pagoda
