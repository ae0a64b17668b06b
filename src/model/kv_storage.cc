#include "model/kv_storage.h"

#include <cstring>

#include "core/error.h"
#include "core/memory_info.h"
#include "kv/kv_layout.h"

namespace pagoda {

KVStorage::KVStorage(const KVStorageShape& s) : shape_(s) {
  PAGODA_ENSURE(s.dtype == DType::kF32 || s.dtype == DType::kBF16 || s.dtype == DType::kF16,
                ErrorCode::kUnsupported,
                "KV cache dtype " << DTypeName(s.dtype) << " is not supported by the CPU cache yet");
  k_slot_bytes_ = k_width() * DTypeBlockBytes(s.dtype);
  v_slot_bytes_ = v_width() * DTypeBlockBytes(s.dtype);
  const int64_t slots = s.num_blocks * s.block_size;
  const int64_t total = s.num_layers * slots * (k_slot_bytes_ + v_slot_bytes_);
  const int64_t available = AvailableMemoryBytes();
  PAGODA_ENSURE(available <= 0 || total <= available, ErrorCode::kResourceExhausted,
                "the KV cache needs " << FormatBytes(total) << " but only " << FormatBytes(available)
                                      << " of memory is available: lower --max-model-len or --kv-cache-memory");
  k_.resize(s.num_layers);
  v_.resize(s.num_layers);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    k_[l].assign(slots * k_slot_bytes_, 0);
    v_[l].assign(slots * v_slot_bytes_, 0);
  }
}

int64_t KVStorage::bytes() const {
  return shape_.num_layers * shape_.num_blocks * shape_.block_size * (k_slot_bytes_ + v_slot_bytes_);
}

void KVStorage::Write(int64_t layer, const float* k, const float* v, const int64_t* slots, int64_t n) {
  const int64_t kw = k_width(), vw = v_width();
  const int64_t capacity = shape_.num_blocks * shape_.block_size;
  for (int64_t t = 0; t < n; ++t) {
    PAGODA_CHECK(slots[t] >= 0 && slots[t] < capacity) << "slot " << slots[t] << " of " << capacity;
    QuantizeRow(shape_.dtype, k + t * kw, k_[layer].data() + slots[t] * k_slot_bytes_, kw);
    QuantizeRow(shape_.dtype, v + t * vw, v_[layer].data() + slots[t] * v_slot_bytes_, vw);
  }
}

void KVStorage::ReadSlot(int64_t layer, bool value, int64_t slot, float* out) const {
  if (value) {
    DequantizeRow(shape_.dtype, v_[layer].data() + slot * v_slot_bytes_, out, v_width());
  } else {
    DequantizeRow(shape_.dtype, k_[layer].data() + slot * k_slot_bytes_, out, k_width());
  }
}

void KVStorage::CopyBlock(int64_t src, int64_t dst) {
  const int64_t kb = shape_.block_size * k_slot_bytes_, vb = shape_.block_size * v_slot_bytes_;
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    std::memcpy(k_[l].data() + dst * kb, k_[l].data() + src * kb, kb);
    std::memcpy(v_[l].data() + dst * vb, v_[l].data() + src * vb, vb);
  }
}

}  // namespace pagoda
