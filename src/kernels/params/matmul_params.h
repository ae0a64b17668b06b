// The weight-matrix view every GEMV/GEMM kernel takes (reference, CPU, CUDA).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda {

struct PackedWeights;  // kernels/cpu/packed_weights.h

// A row-major weight matrix W [rows = output features, cols = input features] in any
// weight dtype; row r starts at data + r * row_bytes. For quantized types, cols is a
// multiple of the block size and blocks run along a row (ggml's layout).
struct WeightMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // not null when rows > 0
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  // Optional: the same weights repacked for the CPU kernels (owned by whoever packed
  // them, e.g. the model). MatMul uses it only if it was packed from this data/shape;
  // a view that changes rows or data must reset it.
  const PackedWeights* packed = nullptr;

  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes; }
};

}  // namespace pagoda
