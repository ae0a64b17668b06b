// CudaKVCache: the CUDA backend's KV cache, per layer a K and a V array of blocks. Each array
// stores its layer's format (kv/kv_format.h's LayerKVFormats): plain rows of shape.dtype (f32,
// bf16 or f16; MLA: the latent and k_pe) or per-token quantized rows (fp8_e4m3, fp8_e5m2,
// int8, int4, nvfp4) in kv/kv_codec.h's byte layout, so a quantized block is [num_kv_heads,
// block_size] rows of KVRowBytes each (head-major), a plain one [block_size, num_kv_heads].
// With kivi2, --kv-sink-tokens or --kv-recent-tokens the quantized layers also keep the wide side
// pool (backend/wide_pool.h plans it; per layer a K and a V array of wide blocks [block_size,
// num_kv_heads, head_dim] in shape.dtype, and one device index [num_blocks] -> wide block or -1
// for all of them). The arrays grow between steps when the pool hands out more wide blocks
// (graphs are then recaptured); side_bytes() counts them.
// Included by the backend's .cu files only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda_memory.cuh"
#include "backend/kv_cache.h"
#include "backend/step_description.h"
#include "backend/wide_pool.h"
#include "core/dtype.h"
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
    if (s.quant != KVQuant::kNone && (s.quant == KVQuant::kKivi2 || s.sink_tokens > 0 || s.recent_tokens > 0)) {
      pool_ = std::make_unique<WidePool>(WidePoolPolicy{.num_blocks = s.num_blocks,
                                                        .block_size = s.block_size,
                                                        .kivi2 = s.quant == KVQuant::kKivi2,
                                                        .sink_tokens = s.sink_tokens,
                                                        .recent_tokens = s.recent_tokens});
      wide_index_ = DeviceAlloc(static_cast<size_t>(s.num_blocks) * sizeof(int32_t));
      PAGODA_CUDA_CHECK(cudaMemset(wide_index_.get(), 0xff, static_cast<size_t>(s.num_blocks) * sizeof(int32_t)));
      k_wide_.resize(s.num_layers);
      v_wide_.resize(s.num_layers);
    }
  }
  const KVStorageShape& shape() const override { return shape_; }
  int64_t bytes() const override {
    int64_t sum = 0;
    for (int64_t l = 0; l < shape_.num_layers; ++l) sum += shape_.num_blocks * (k_block_bytes(l) + v_block_bytes(l));
    return sum;
  }
  int64_t side_bytes() const override {
    if (!pool_) return 0;
    int64_t layers = 0;
    for (int64_t l = 0; l < shape_.num_layers; ++l) layers += uses_wide(l);
    return layers * wide_capacity_ * (wide_k_block_bytes() + wide_v_block_bytes()) +
           shape_.num_blocks * int64_t{sizeof(int32_t)};
  }
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

  // ---- the wide side pool ----
  WidePool* pool() const { return pool_.get(); }
  // Whether layer l reads and writes the pool (a quantized layer of a cache with one).
  bool uses_wide(int64_t l) const { return pool_ != nullptr && k_format_[l].quant != KVQuant::kNone; }
  void* k_wide(int64_t l) const { return k_wide_[l].get(); }
  void* v_wide(int64_t l) const { return v_wide_[l].get(); }
  const int32_t* wide_index() const { return static_cast<const int32_t*>(wide_index_.get()); }
  // The step's plan in device memory (PlanWideStep): per token its wide row and filled block.
  const int32_t* wide_rows() const { return static_cast<const int32_t*>(wide_rows_.ptr.get()); }
  const int32_t* fill_blocks() const { return static_cast<const int32_t*>(fill_blocks_.ptr.get()); }

  // Plans the step's writes (WidePool::PlanStep), grows the arrays to the pool's size and uploads
  // the plan and the index's changes. Sets *moved when a buffer a graph reads moved.
  void PlanWideStep(const StepDescription& step, cudaStream_t stream, bool* moved) {
    if (!pool_) return;
    pool_->PlanStep(step.slot_mapping, step.positions);
    GrowWide(stream, moved);
    const int64_t n = step.num_tokens();
    wide_rows_.UploadGrowing(pool_->wide_rows().data(), n, moved);
    fill_blocks_.UploadGrowing(pool_->fill_blocks().data(), n, moved);
    UploadIndexChanges();
  }
  // Freed blocks no prefix hit can reach: their wide copies go back (the index's change is
  // uploaded with the next step's plan).
  void ReleaseBlocks(std::span<const int32_t> blocks) override {
    if (pool_) pool_->Release(blocks);
  }
  // Copy-on-write of src into dst, for the pool: the wide copy's bytes in every layer that uses it.
  void CopyWideBlock(int32_t src, int32_t dst, cudaStream_t stream, bool* moved) {
    if (!pool_) return;
    const auto [ws, wd] = pool_->CopyBlock(src, dst);
    GrowWide(stream, moved);
    UploadIndexChanges();
    if (ws < 0) return;
    for (int64_t l = 0; l < shape_.num_layers; ++l) {
      if (!uses_wide(l)) continue;
      for (const auto& [arr, bytes] : {std::pair{&k_wide_, wide_k_block_bytes()}, std::pair{&v_wide_, wide_v_block_bytes()}}) {
        char* base = static_cast<char*>((*arr)[l].get());
        PAGODA_CUDA_CHECK(cudaMemcpyAsync(base + wd * bytes, base + ws * bytes, bytes, cudaMemcpyDeviceToDevice, stream));
      }
    }
  }

 private:
  int64_t wide_k_block_bytes() const { return shape_.block_size * k_width_ * DTypeBlockBytes(shape_.dtype); }
  int64_t wide_v_block_bytes() const { return shape_.block_size * v_width_ * DTypeBlockBytes(shape_.dtype); }
  // Arrays of at least pool_->size() wide blocks (doubling), the old contents kept.
  void GrowWide(cudaStream_t stream, bool* moved) {
    const int64_t need = pool_->size();
    if (need <= wide_capacity_) return;
    const int64_t capacity = std::max<int64_t>({need, 2 * wide_capacity_, 8});
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old arrays' writes are done
    for (int64_t l = 0; l < shape_.num_layers; ++l) {
      if (!uses_wide(l)) continue;
      for (const auto& [arr, bytes] : {std::pair{&k_wide_, wide_k_block_bytes()}, std::pair{&v_wide_, wide_v_block_bytes()}}) {
        std::shared_ptr<void> grown = DeviceAlloc(static_cast<size_t>(capacity * bytes));
        if (wide_capacity_ > 0) {
          PAGODA_CUDA_CHECK(cudaMemcpy(grown.get(), (*arr)[l].get(), wide_capacity_ * bytes, cudaMemcpyDeviceToDevice));
        }
        // Zeros, not stale bytes, in rows no token wrote (the padding block's: WidePool's header).
        PAGODA_CUDA_CHECK(cudaMemset(static_cast<char*>(grown.get()) + wide_capacity_ * bytes, 0,
                                     (capacity - wide_capacity_) * bytes));
        (*arr)[l] = std::move(grown);
      }
    }
    wide_capacity_ = capacity;
    *moved = true;
  }
  void UploadIndexChanges() {
    const auto [lo, hi] = pool_->TakeChanged();
    if (hi > lo) {
      PAGODA_CUDA_CHECK(cudaMemcpy(static_cast<int32_t*>(wide_index_.get()) + lo, pool_->index().data() + lo,
                                   (hi - lo) * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
  }

  KVStorageShape shape_;
  uint64_t id_ = 0;
  int64_t k_width_ = 0, v_width_ = 0;
  std::vector<KVArrayFormat> k_format_, v_format_;
  std::vector<std::shared_ptr<void>> k_, v_;
  std::unique_ptr<WidePool> pool_;
  std::vector<std::shared_ptr<void>> k_wide_, v_wide_;  // per layer (null where unused)
  std::shared_ptr<void> wide_index_;
  int64_t wide_capacity_ = 0;
  DeviceScratch wide_rows_, fill_blocks_;
};

inline CudaKVCache& AsCudaKVCache(KVCache& cache) {
  auto* c = dynamic_cast<CudaKVCache*>(&cache);
  PAGODA_CHECK(c != nullptr) << "the KV cache was not made by the CUDA backend";
  return *c;
}

}  // namespace pagoda
