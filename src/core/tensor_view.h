// TensorView: a small non-owning view of a 2-D array (rows x cols, a row stride in elements)
// on a device. Activations and prepared vectors are passed to the Backend as views; the bytes
// belong to whoever made them (a Workspace, the backend, the caller). A column range of a
// wider array is a view with the wider row stride.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda {

enum class Device : uint8_t { kCpu, kCuda };

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements from one row to the next (>= cols)
  Device device = Device::kCpu;

  static TensorView F32(float* data, int64_t rows, int64_t cols, Device device = Device::kCpu) {
    return {data, DType::kF32, rows, cols, cols, device};
  }
  static TensorView F32(const float* data, int64_t rows, int64_t cols, Device device = Device::kCpu) {
    return F32(const_cast<float*>(data), rows, cols, device);
  }

  float* f32() const { return static_cast<float*>(data); }
  bool contiguous() const { return row_stride == cols; }
  int64_t size() const { return rows * cols; }
  // Rows [r0, r0 + n).
  TensorView RowRange(int64_t r0, int64_t n) const {
    TensorView v = *this;
    v.data = static_cast<char*>(data) + r0 * row_stride * DTypeBlockBytes(dtype);
    v.rows = n;
    return v;
  }
  // Columns [c0, c0 + n) of every row (same row stride).
  TensorView ColRange(int64_t c0, int64_t n) const {
    TensorView v = *this;
    v.data = static_cast<char*>(data) + c0 * DTypeBlockBytes(dtype);
    v.cols = n;
    return v;
  }
  // The first n rows of a contiguous buffer reshaped to [n, cols].
  TensorView As(int64_t n, int64_t c) const {
    TensorView v = *this;
    v.rows = n;
    v.cols = c;
    v.row_stride = c;
    return v;
  }
};

}  // namespace pagoda
