// CudaKVCache: the CUDA backend's KV cache, per layer a K and a V array of blocks
// [num_blocks, block_size, width] in shape.dtype (f32, bf16 or f16; MLA: the latent and k_pe).
// Included by the backend's .cu files only.
#pragma once

#include <memory>
#include <vector>

#include "backend/cuda_memory.cuh"
#include "backend/kv_cache.h"
#include "core/error.h"

namespace pagoda {

class CudaKVCache : public KVCache {
 public:
  explicit CudaKVCache(const KVStorageShape& s) : shape_(s) {
    k_width_ = s.num_kv_heads * s.head_dim;
    v_width_ = s.num_kv_heads * (s.head_dim_v > 0 ? s.head_dim_v : s.head_dim);
    for (int64_t l = 0; l < s.num_layers; ++l) {
      k_.push_back(DeviceAlloc(k_block_bytes() * s.num_blocks));
      v_.push_back(DeviceAlloc(v_block_bytes() * s.num_blocks));
    }
  }
  const KVStorageShape& shape() const override { return shape_; }
  int64_t bytes() const override { return shape_.num_layers * shape_.num_blocks * (k_block_bytes() + v_block_bytes()); }
  int64_t side_bytes() const override { return 0; }
  // Only quantized formats use per-tensor scales, and those are refused at creation.
  void SetTensorScales(int64_t, float, float) override {}

  void* k(int64_t l) const { return k_[l].get(); }
  void* v(int64_t l) const { return v_[l].get(); }
  int64_t k_width() const { return k_width_; }
  int64_t v_width() const { return v_width_; }
  int64_t k_block_bytes() const { return shape_.block_size * k_width_ * element_bytes(); }
  int64_t v_block_bytes() const { return shape_.block_size * v_width_ * element_bytes(); }

 private:
  int64_t element_bytes() const { return shape_.dtype == DType::kF32 ? 4 : 2; }

  KVStorageShape shape_;
  int64_t k_width_ = 0, v_width_ = 0;
  std::vector<std::shared_ptr<void>> k_, v_;
};

inline CudaKVCache& AsCudaKVCache(KVCache& cache) {
  auto* c = dynamic_cast<CudaKVCache*>(&cache);
  PAGODA_CHECK(c != nullptr) << "the KV cache was not made by the CUDA backend";
  return *c;
}

}  // namespace pagoda
