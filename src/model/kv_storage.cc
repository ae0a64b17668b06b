#include "model/kv_storage.h"

#include <cstring>

#include "core/error.h"

namespace pagoda {

KVStorage::KVStorage(const KVStorageShape& s) : shape_(s) {
  PAGODA_ENSURE(s.dtype == DType::kF32 || s.dtype == DType::kBF16 || s.dtype == DType::kF16,
                ErrorCode::kUnsupported,
                "KV cache dtype " << DTypeName(s.dtype) << " is not supported by the CPU cache yet");
  slot_bytes_ = s.num_kv_heads * s.head_dim * DTypeBlockBytes(s.dtype);
  const int64_t layer_bytes = s.num_blocks * s.block_size * slot_bytes_;
  k_.resize(s.num_layers);
  v_.resize(s.num_layers);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    k_[l].assign(layer_bytes, 0);
    v_[l].assign(layer_bytes, 0);
  }
}

int64_t KVStorage::bytes() const { return 2 * shape_.num_layers * shape_.num_blocks * shape_.block_size * slot_bytes_; }

void KVStorage::Write(int64_t layer, const float* k, const float* v, const int64_t* slots, int64_t n) {
  const int64_t width = shape_.num_kv_heads * shape_.head_dim;
  const int64_t capacity = shape_.num_blocks * shape_.block_size;
  for (int64_t t = 0; t < n; ++t) {
    PAGODA_CHECK(slots[t] >= 0 && slots[t] < capacity) << "slot " << slots[t] << " of " << capacity;
    QuantizeRow(shape_.dtype, k + t * width, k_[layer].data() + slots[t] * slot_bytes_, width);
    QuantizeRow(shape_.dtype, v + t * width, v_[layer].data() + slots[t] * slot_bytes_, width);
  }
}

void KVStorage::ReadSlot(int64_t layer, bool value, int64_t slot, float* out) const {
  const auto& buf = value ? v_[layer] : k_[layer];
  DequantizeRow(shape_.dtype, buf.data() + slot * slot_bytes_, out, shape_.num_kv_heads * shape_.head_dim);
}

void KVStorage::CopyBlock(int64_t src, int64_t dst) {
  const int64_t block_bytes = shape_.block_size * slot_bytes_;
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    std::memcpy(k_[l].data() + dst * block_bytes, k_[l].data() + src * block_bytes, block_bytes);
    std::memcpy(v_[l].data() + dst * block_bytes, v_[l].data() + src * block_bytes, block_bytes);
  }
}

}  // namespace pagoda
