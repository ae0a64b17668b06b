#include "model/weight_views.h"

#include "core/error.h"

namespace pagoda {

WeightMatrix MakeWeightView(DType dtype, const void* data, int64_t stored_elements, int64_t rows,
                            int64_t cols, const std::string& what) {
  PAGODA_ENSURE(stored_elements == rows * cols, ErrorCode::kCorruptData,
                what << ": has " << stored_elements << " values, expected " << rows << " x " << cols);
  PAGODA_ENSURE(cols % DTypeBlockSize(dtype) == 0, ErrorCode::kCorruptData,
                what << ": row length " << cols << " is not a multiple of the " << DTypeName(dtype)
                     << " block size");
  WeightMatrix m;
  m.dtype = dtype;
  m.data = data;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = DTypeRowBytes(dtype, cols);
  return m;
}

std::vector<float> ToF32(DType dtype, const void* data, int64_t stored_elements, int64_t n,
                         const std::string& what) {
  PAGODA_ENSURE(stored_elements == n, ErrorCode::kCorruptData,
                what << ": has " << stored_elements << " values, expected " << n);
  std::vector<float> out(n);
  DequantizeRow(dtype, data, out.data(), n);
  return out;
}

}  // namespace pagoda
