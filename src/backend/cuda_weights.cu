#include "backend/cuda_weights.cuh"

#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda_memory.cuh"
#include "core/dtype.h"

namespace pagoda {

std::shared_ptr<CudaWeight> UploadRows(std::span<const WeightMatrix> parts, StackOrder order, int64_t* rounded,
                                       int64_t* bytes) {
  auto p = std::make_shared<CudaWeight>();
  p->cols = parts[0].cols;
  bool all_f32 = true;
  for (const WeightMatrix& w : parts) {
    PAGODA_CHECK(w.cols == p->cols) << "stacked weights of " << w.cols << " and " << p->cols << " columns";
    p->rows += w.rows;
    all_f32 = all_f32 && w.dtype == DType::kF32;
    if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) ++*rounded;
  }
  // Row r of the stack: (part, row in part).
  std::vector<std::pair<int, int64_t>> source;
  source.reserve(p->rows);
  if (order == StackOrder::kPairs16) {
    PAGODA_CHECK(parts.size() == 2 && parts[0].rows == parts[1].rows && parts[0].rows % 16 == 0)
        << "kPairs16 stacks two parts of equal rows, a multiple of 16";
    for (int64_t b = 0; b < parts[0].rows; b += 16) {
      for (int part = 0; part < 2; ++part) {
        for (int64_t j = 0; j < 16; ++j) source.emplace_back(part, b + j);
      }
    }
  } else {
    for (int part = 0; part < static_cast<int>(parts.size()); ++part) {
      for (int64_t r = 0; r < parts[part].rows; ++r) source.emplace_back(part, r);
    }
  }
  std::vector<float> row(static_cast<size_t>(p->cols));
  if (all_f32) {
    p->dtype = DType::kF32;
    p->k_padded = p->cols;
    std::vector<float> host(static_cast<size_t>(p->rows * p->cols));
    for (int64_t r = 0; r < p->rows; ++r) {
      const WeightMatrix& w = parts[source[r].first];
      DequantizeRow(w.dtype, w.row(source[r].second), host.data() + r * p->cols, p->cols);
    }
    p->data = DeviceAlloc(host.size() * sizeof(float));
    PAGODA_CUDA_CHECK(cudaMemcpy(p->data.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    *bytes += static_cast<int64_t>(host.size() * sizeof(float));
    return p;
  }
  p->dtype = DType::kBF16;
  p->k_padded = cuda::GemmPaddedK(p->cols);
  p->splits = cuda::GemmSplitsFor(p->rows, p->k_padded);
  std::vector<uint16_t> host(static_cast<size_t>(p->rows * p->k_padded), 0);
  for (int64_t r = 0; r < p->rows; ++r) {
    const WeightMatrix& w = parts[source[r].first];
    uint16_t* out = host.data() + r * p->k_padded;
    if (w.dtype == DType::kBF16) {
      std::memcpy(out, w.row(source[r].second), p->cols * sizeof(uint16_t));
    } else {
      DequantizeRow(w.dtype, w.row(source[r].second), row.data(), p->cols);
      for (int64_t i = 0; i < p->cols; ++i) out[i] = F32ToBf16(row[i]);
    }
  }
  p->data = DeviceAlloc(host.size() * sizeof(uint16_t));
  PAGODA_CUDA_CHECK(cudaMemcpy(p->data.get(), host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  *bytes += static_cast<int64_t>(host.size() * sizeof(uint16_t));
  return p;
}


CudaWeight WidenToF32(const CudaWeight& w) {
  if (w.dtype == DType::kF32) return w;
  std::vector<uint16_t> bits(static_cast<size_t>(w.rows * w.k_padded));
  PAGODA_CUDA_CHECK(cudaMemcpy(bits.data(), w.bf16(), bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  std::vector<float> wide(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) wide[r * w.cols + c] = Bf16ToF32(bits[r * w.k_padded + c]);
  }
  CudaWeight out;
  out.dtype = DType::kF32;
  out.rows = w.rows;
  out.cols = out.k_padded = w.cols;
  out.data = DeviceAlloc(wide.size() * sizeof(float));
  PAGODA_CUDA_CHECK(cudaMemcpy(out.data.get(), wide.data(), wide.size() * sizeof(float), cudaMemcpyHostToDevice));
  return out;
}

}  // namespace pagoda
