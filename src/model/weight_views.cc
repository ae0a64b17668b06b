#include "model/weight_views.h"

#include <cstring>
#include <string>

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

WeightMatrix RowSlice(const WeightMatrix& w, int64_t r0, int64_t n) {
  WeightMatrix out = w;
  out.data = w.row(r0);
  out.rows = n;
  return out;
}

WeightMatrix ColSlice(const WeightMatrix& w, int64_t c0, int64_t n, std::vector<std::shared_ptr<const void>>* keep) {
  const int64_t block = DTypeBlockSize(w.dtype);
  if (c0 % block != 0 || n % block != 0) {
    ThrowUnsupported("tensor parallelism: a " + std::string(DTypeName(w.dtype)) + " matrix cannot be split at column " +
                     std::to_string(c0) + " (its blocks are " + std::to_string(block) + " wide)");
  }
  const int64_t offset = DTypeRowBytes(w.dtype, c0), bytes = DTypeRowBytes(w.dtype, n);
  auto buffer = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(w.rows * bytes)]);
  for (int64_t r = 0; r < w.rows; ++r) std::memcpy(buffer.get() + r * bytes, w.row(r) + offset, bytes);
  WeightMatrix out = w;
  out.data = buffer.get();
  out.cols = n;
  out.row_bytes = bytes;
  keep->push_back(std::shared_ptr<const void>(buffer, buffer.get()));
  return out;
}

std::vector<float> SliceValues(const std::vector<float>& v, int64_t begin, int64_t n) {
  if (v.empty()) return {};
  return std::vector<float>(v.begin() + begin, v.begin() + begin + n);
}


void CheckShardRank(int rank, int size) {
  PAGODA_ENSURE(size >= 1 && rank >= 0 && rank < size, ErrorCode::kInvalidArgument,
                "tensor parallelism: rank " << rank << " of " << size);
}

void RequireShardDivides(int64_t n, int size, const std::string& what, const std::string& model) {
  if (n % size != 0) {
    ThrowUnsupported("--tensor-parallel-size " + std::to_string(size) + " does not divide the " + std::to_string(n) +
                     " " + what + " of " + model);
  }
}

}  // namespace pagoda
