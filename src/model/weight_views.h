// Helpers for loaders: checked WeightMatrix views and small f32 copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/params/matmul_params.h"

namespace pagoda {

// A view of `rows x cols` values of dtype at data; `what` names the tensor in errors.
// Throws kCorruptData when the stored element count differs or the row length is not a
// multiple of the dtype's block size.
WeightMatrix MakeWeightView(DType dtype, const void* data, int64_t stored_elements, int64_t rows,
                            int64_t cols, const std::string& what);

// Converts n values of any dtype to f32 (norm weights, biases).
std::vector<float> ToF32(DType dtype, const void* data, int64_t stored_elements, int64_t n,
                         const std::string& what);

}  // namespace pagoda
