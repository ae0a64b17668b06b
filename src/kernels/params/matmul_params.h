// The weight-matrix view every GEMV/GEMM kernel takes (reference, CPU, CUDA).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda {

// A row-major weight matrix W [rows = output features, cols = input features] in any
// weight dtype; row r starts at data + r * row_bytes. For quantized types, cols is a
// multiple of the block size and blocks run along a row (ggml's layout).
struct WeightMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // not null when rows > 0
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes; }
};

// How the rows of matrices stacked into one (fused projections: q|k|v, gate|up) interleave:
// kConcat one part after the other; kPairs16 two parts of equal rows alternating 16 rows at a
// time (row 32i + j = part 0 row 16i + j, row 32i + 16 + j = part 1 row 16i + j).
enum class StackOrder { kConcat, kPairs16 };

}  // namespace pagoda
