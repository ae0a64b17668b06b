// KVCache: the bytes of a paged KV cache in a backend's memory, addressed by block id (a block
// id means the same slot in every layer; kv/ hands out the ids and keeps the bookkeeping, the
// backend only holds the bytes). Made by Backend::CreateKVCache; the model writes and reads it
// only through the backend's WriteKV / PagedAttention / MlaAttention / CopyBlocks.
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_format.h"

namespace pagoda {

class KVCache {
 public:
  virtual ~KVCache() = default;
  virtual const KVStorageShape& shape() const = 0;
  // Bytes of the block arrays (what KVBytesPerToken predicts); side pools are side_bytes().
  virtual int64_t bytes() const = 0;
  virtual int64_t side_bytes() const = 0;
  // Per-tensor scales of one layer from a checkpoint (k_scale / v_scale); <= 0: none.
  // REQUIRES: no token of the layer written yet.
  virtual void SetTensorScales(int64_t layer, float k_scale, float v_scale) = 0;
  // Blocks whose bytes are dead until a new owner writes them from offset 0 (freed, not
  // cached: KVCacheManager::TakeReleasedBlocks): what the cache keeps beside them (the side
  // pool's wide copies) goes back. Nothing by default.
  virtual void ReleaseBlocks(std::span<const int32_t> /*blocks*/) {}
};

}  // namespace pagoda
