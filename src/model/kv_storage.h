// The bytes of the paged KV cache on the CPU backend: per layer, a K array of blocks
// [num_blocks, block_size, num_kv_heads, head_dim] and a V array of blocks
// [num_blocks, block_size, num_kv_heads, head_dim_v] (MLA: K holds the latent c_kv and
// V the RoPE key k_pe, one "head"). A block id means the same
// slot in every layer (kv/ hands out ids; this class only holds the bytes).
//
// Not thread-safe for concurrent writes to the same slots; the model writes each new
// token's slot once per layer per step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

struct KVStorageShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;     // 0: same as head_dim
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16
};

class KVStorage {
 public:
  explicit KVStorage(const KVStorageShape& shape);

  const KVStorageShape& shape() const { return shape_; }
  void* k(int64_t layer) { return k_[layer].data(); }
  void* v(int64_t layer) { return v_[layer].data(); }
  const void* k(int64_t layer) const { return k_[layer].data(); }
  const void* v(int64_t layer) const { return v_[layer].data(); }
  int64_t bytes() const;

  int64_t v_width() const { return shape_.num_kv_heads * (shape_.head_dim_v > 0 ? shape_.head_dim_v : shape_.head_dim); }
  int64_t k_width() const { return shape_.num_kv_heads * shape_.head_dim; }

  // Stores k [n, num_kv_heads, head_dim] and v [n, num_kv_heads, head_dim_v] f32 of n tokens at their slots
  // (slot = block_id * block_size + offset), converting to the cache dtype.
  void Write(int64_t layer, const float* k, const float* v, const int64_t* slots, int64_t n);
  // Reads one token's K [num_kv_heads, head_dim] or V [num_kv_heads, head_dim_v] back as f32 (tests, debugging).
  void ReadSlot(int64_t layer, bool value, int64_t slot, float* out) const;
  // Copies block src to dst in every layer (copy-on-write).
  void CopyBlock(int64_t src, int64_t dst);

 private:
  KVStorageShape shape_;
  int64_t k_slot_bytes_;
  int64_t v_slot_bytes_;
  std::vector<std::vector<uint8_t>> k_, v_;
};

}  // namespace pagoda
