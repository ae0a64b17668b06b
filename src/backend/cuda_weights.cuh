// The CUDA backend's prepared weights: f32 [rows, cols] for f32 models, else bf16 bits
// [rows, k_padded] (k padded with zeros to the GEMM's k-tile) with their fixed k chunks
// (kernels/cuda/gemm.h). Included by the backend's .cu files only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "core/error.h"
#include "kernels/cuda/gemm.h"
#include "kernels/params/matmul_params.h"

namespace pagoda {

struct CudaWeight {
  std::shared_ptr<void> data;
  DType dtype = DType::kF32;  // kF32 or kBF16
  int64_t rows = 0, cols = 0, k_padded = 0;
  cuda::GemmSplits splits;
  const float* f32() const { return static_cast<const float*>(data.get()); }
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data.get()); }
};

inline const CudaWeight& Impl(const Weight& w) {
  PAGODA_CHECK(w.impl != nullptr) << "CudaBackend: a weight not prepared by the CUDA backend";
  return *static_cast<const CudaWeight*>(w.impl.get());
}

// Rows of `parts` stacked in `order` (kernels/params/matmul_params.h), uploaded as one weight:
// f32 when every part is f32, else bf16 with k padded to the GEMM's k-tile. Quantized and f16
// values are rounded to bf16 (counted in *rounded); *bytes grows by the bytes uploaded.
std::shared_ptr<CudaWeight> UploadRows(std::span<const WeightMatrix> parts, StackOrder order, int64_t* rounded,
                                       int64_t* bytes);

// `w` as f32 on the device (bf16 values widened exactly; an f32 weight is shared as it is).
CudaWeight WidenToF32(const CudaWeight& w);

}  // namespace pagoda
