// Helpers for loaders and shards: checked WeightMatrix views, slices and small f32 copies.
#pragma once

#include <cstdint>
#include <memory>
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

// Tensor parallelism's slices. Rows [r0, r0 + n) of w: a view into the same memory.
WeightMatrix RowSlice(const WeightMatrix& w, int64_t r0, int64_t n);
// Columns [c0, c0 + n) of w, copied into a buffer appended to *keep. Quantized rows are cut at
// block boundaries only (Unsupported otherwise, naming the dtype and the column).
WeightMatrix ColSlice(const WeightMatrix& w, int64_t c0, int64_t n, std::vector<std::shared_ptr<const void>>* keep);
// Tensor parallelism's checks: 0 <= rank < size (InvalidArgument), and `size` dividing a
// model's count (Unsupported: "--tensor-parallel-size S does not divide the N <what> of <model>").
void CheckShardRank(int rank, int size);
void RequireShardDivides(int64_t n, int size, const std::string& what, const std::string& model);
// v[begin, begin + n), or empty when v is.
std::vector<float> SliceValues(const std::vector<float>& v, int64_t begin, int64_t n);

}  // namespace pagoda
