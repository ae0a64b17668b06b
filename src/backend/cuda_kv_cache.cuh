// CudaKVCache: the CUDA backend's KV cache, per layer a K and a V array of blocks. Each array
// stores its layer's format (kv/kv_format.h's LayerKVFormats): plain rows of shape.dtype (f32,
// bf16 or f16; MLA: the latent and k_pe) or per-token quantized rows (fp8_e4m3, fp8_e5m2,
// int8, int4, nvfp4) in kv/kv_codec.h's byte layout, so a quantized block is [num_kv_heads,
// block_size] rows of KVRowBytes each (head-major), a plain one [block_size, num_kv_heads].
// Included by the backend's .cu files only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda_memory.cuh"
#include "backend/kv_cache.h"
#include "core/error.h"
#include "kv/kv_codec.h"

namespace pagoda {

class CudaKVCache : public KVCache {
 public:
  explicit CudaKVCache(const KVStorageShape& s) : shape_(s) {
    static std::atomic<uint64_t> next_id{1};
    id_ = next_id++;
    k_width_ = s.num_kv_heads * s.head_dim;
    v_width_ = s.num_kv_heads * (s.head_dim_v > 0 ? s.head_dim_v : s.head_dim);
    for (int64_t l = 0; l < s.num_layers; ++l) {
      const KVLayerFormats f = LayerKVFormats(s, l);
      k_format_.push_back(f.k);
      v_format_.push_back(f.v);
      k_.push_back(DeviceAlloc(k_block_bytes(l) * s.num_blocks));
      v_.push_back(DeviceAlloc(v_block_bytes(l) * s.num_blocks));
      // Zeroed: the prefill kernel's bulk copies read whole paged blocks, slots no token has
      // written yet included; their scores are masked, but a stale NaN in V would survive P = 0.
      PAGODA_CUDA_CHECK(cudaMemset(k_.back().get(), 0, k_block_bytes(l) * s.num_blocks));
      PAGODA_CUDA_CHECK(cudaMemset(v_.back().get(), 0, v_block_bytes(l) * s.num_blocks));
    }
  }
  const KVStorageShape& shape() const override { return shape_; }
  int64_t bytes() const override {
    int64_t sum = 0;
    for (int64_t l = 0; l < shape_.num_layers; ++l) sum += shape_.num_blocks * (k_block_bytes(l) + v_block_bytes(l));
    return sum;
  }
  int64_t side_bytes() const override { return 0; }
  // Checkpoint scales of one layer: fp8 then uses them instead of per-token scales.
  void SetTensorScales(int64_t layer, float k_scale, float v_scale) override {
    PAGODA_CHECK(layer >= 0 && layer < shape_.num_layers) << "layer " << layer;
    if (k_format_[layer].quant != KVQuant::kNone) k_format_[layer].tensor_scale = k_scale > 0.0f ? k_scale : 0.0f;
    if (v_format_[layer].quant != KVQuant::kNone) v_format_[layer].tensor_scale = v_scale > 0.0f ? v_scale : 0.0f;
  }

  void* k(int64_t l) const { return k_[l].get(); }
  void* v(int64_t l) const { return v_[l].get(); }
  const KVArrayFormat& k_format(int64_t l) const { return k_format_[l]; }
  const KVArrayFormat& v_format(int64_t l) const { return v_format_[l]; }
  int64_t k_width() const { return k_width_; }
  int64_t v_width() const { return v_width_; }
  int64_t k_block_bytes(int64_t l) const { return KVBlockBytes(k_format_[l]); }
  int64_t v_block_bytes(int64_t l) const { return KVBlockBytes(v_format_[l]); }
  // Distinct for every cache the process makes (an address may be reused by a later cache).
  uint64_t id() const { return id_; }

 private:
  KVStorageShape shape_;
  uint64_t id_ = 0;
  int64_t k_width_ = 0, v_width_ = 0;
  std::vector<KVArrayFormat> k_format_, v_format_;
  std::vector<std::shared_ptr<void>> k_, v_;
};

inline CudaKVCache& AsCudaKVCache(KVCache& cache) {
  auto* c = dynamic_cast<CudaKVCache*>(&cache);
  PAGODA_CHECK(c != nullptr) << "the KV cache was not made by the CUDA backend";
  return *c;
}

}  // namespace pagoda
