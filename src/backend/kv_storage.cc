#include "backend/kv_storage.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/memory_info.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kv/kv_codec.h"
#include "kv/kv_layout.h"

namespace pagoda {

KVStorage::KVStorage(const KVStorageShape& s) : shape_(s) {
  PAGODA_ENSURE(s.dtype == DType::kF32 || s.dtype == DType::kBF16 || s.dtype == DType::kF16,
                ErrorCode::kUnsupported,
                "KV cache dtype " << DTypeName(s.dtype) << " is not supported by the CPU cache");
  PAGODA_ENSURE(s.group_size > 0, ErrorCode::kInvalidArgument,
                "--kv-quant-group-size must be positive, got " << s.group_size);
  PAGODA_ENSURE(s.sink_tokens >= 0 && s.recent_tokens >= 0, ErrorCode::kInvalidArgument,
                "--kv-sink-tokens and --kv-recent-tokens must be >= 0");
  PAGODA_ENSURE(s.heavy_tokens >= 0 && s.heavy_tokens <= s.block_size, ErrorCode::kInvalidArgument,
                "--kv-heavy-tokens must be in 0.." << s.block_size << " (the block size), got "
                                                    << s.heavy_tokens);
  for (int64_t l : s.wide_layers) {
    PAGODA_ENSURE(l >= 0 && l < s.num_layers, ErrorCode::kInvalidArgument,
                  "--kv-cache-dtype-skip-layers: layer " << l << " is outside 0.." << s.num_layers - 1);
  }
  int64_t total = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const auto [fk, fv] = LayerKVFormats(s, l);
    k_format_.push_back(fk);
    v_format_.push_back(fv);
    total += s.num_blocks * (KVBlockBytes(fk) + KVBlockBytes(fv));
  }
  const int64_t available = AvailableMemoryBytes();
  PAGODA_ENSURE(available <= 0 || total <= available, ErrorCode::kResourceExhausted,
                "the KV cache needs " << FormatBytes(total) << " but only " << FormatBytes(available)
                                      << " of memory is available: lower --max-model-len or --kv-cache-memory");
  const auto L = static_cast<size_t>(s.num_layers);
  k_.resize(L);
  v_.resize(L);
  wide_k_.resize(L);
  wide_v_.resize(L);
  wide_index_.resize(L);
  wide_free_.resize(L);
  sink_block_.resize(L);
  keys_quantized_.resize(L);
  filled_.resize(L);
  mass_.resize(L);
  mass_count_.resize(L);
  heavy_frozen_.resize(L);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    k_[l].assign(s.num_blocks * KVBlockBytes(k_format_[l]), 0);
    v_[l].assign(s.num_blocks * KVBlockBytes(v_format_[l]), 0);
    if (UsesWide(l)) {
      wide_index_[l].assign(s.num_blocks, -1);
      sink_block_[l].assign(s.num_blocks, 0);
      keys_quantized_[l].assign(s.num_blocks, 0);
    }
    if (UsesWide(l) && s.heavy_tokens > 0) {
      mass_[l].assign(s.num_blocks * s.block_size, 0.0f);
      mass_count_[l].assign(s.num_blocks * s.block_size, 0.0f);
      heavy_frozen_[l].assign(s.num_blocks, 0);
    }
  }
}

int64_t KVStorage::bytes() const {
  int64_t total = 0;
  for (int64_t l = 0; l < shape_.num_layers; ++l) total += k_[l].size() + v_[l].size();
  return total;
}

int64_t KVStorage::side_bytes() const {
  int64_t total = 0;
  for (int64_t l = 0; l < shape_.num_layers; ++l) total += wide_k_[l].size() + wide_v_[l].size();
  return total;
}

bool KVStorage::UsesWide(int64_t layer) const {
  if (k_format_[layer].quant == KVQuant::kNone) return false;
  return k_format_[layer].quant == KVQuant::kKivi2 || shape_.sink_tokens > 0 ||
         shape_.recent_tokens > 0 || shape_.heavy_tokens > 0;
}

void KVStorage::SetTensorScales(int64_t layer, float k_scale, float v_scale) {
  PAGODA_CHECK(layer >= 0 && layer < shape_.num_layers) << "layer " << layer;
  if (k_format_[layer].quant != KVQuant::kNone) k_format_[layer].tensor_scale = std::max(k_scale, 0.0f);
  if (v_format_[layer].quant != KVQuant::kNone) v_format_[layer].tensor_scale = std::max(v_scale, 0.0f);
}

// The wide copy of `block` in `layer`, allocated (and seeded with the block's first `offset`
// rows, dequantized) if it has none.
int32_t KVStorage::WideBlock(int64_t layer, int64_t block, int64_t offset) {
  int32_t& w = wide_index_[layer][block];
  if (w >= 0) return w;
  if (!wide_free_[layer].empty()) {
    w = wide_free_[layer].back();
    wide_free_[layer].pop_back();
  } else {
    const int64_t esize = DTypeBlockBytes(shape_.dtype);
    w = static_cast<int32_t>(wide_k_[layer].size() / (shape_.block_size * k_width() * esize));
    wide_k_[layer].resize(wide_k_[layer].size() + shape_.block_size * k_width() * esize);
    wide_v_[layer].resize(wide_v_[layer].size() + shape_.block_size * v_width() * esize);
  }
  if (offset > 0) DequantizeIntoWide(layer, block, offset);
  return w;
}

void KVStorage::DequantizeIntoWide(int64_t layer, int64_t block, int64_t rows) {
  const int64_t esize = DTypeBlockBytes(shape_.dtype);
  const int64_t w = wide_index_[layer][block], bs = shape_.block_size;
  const KVArrayFormat& fk = k_format_[layer];
  const KVArrayFormat& fv = v_format_[layer];
  std::vector<float> row(std::max(fk.head_dim, fv.head_dim));
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t h = 0; h < shape_.num_kv_heads; ++h) {
      // Keys of a kivi2 block that was never filled have no codes: zeros (unreachable in
      // practice, as blocks are written from offset 0 by the sequence that owns them).
      if (!fk.per_channel || keys_quantized_[layer][block]) {
        DequantizeKVRow(fk, k_[layer].data() + block * KVBlockBytes(fk), o, h, row.data());
      } else {
        std::fill(row.begin(), row.end(), 0.0f);
      }
      QuantizeRow(shape_.dtype, row.data(),
                  wide_k_[layer].data() + ((w * bs + o) * shape_.num_kv_heads + h) * fk.head_dim * esize,
                  fk.head_dim);
      DequantizeKVRow(fv, v_[layer].data() + block * KVBlockBytes(fv), o, h, row.data());
      QuantizeRow(shape_.dtype, row.data(),
                  wide_v_[layer].data() + ((w * bs + o) * shape_.num_kv_heads + h) * fv.head_dim * esize,
                  fv.head_dim);
    }
  }
}

void KVStorage::QuantizeFullKeys(int64_t layer, int64_t block) {
  const KVArrayFormat& fk = k_format_[layer];
  const int64_t esize = DTypeBlockBytes(shape_.dtype);
  const int64_t n = shape_.block_size * k_width();
  std::vector<float> keys(n);
  DequantizeRow(shape_.dtype, wide_k_[layer].data() + wide_index_[layer][block] * n * esize, keys.data(), n);
  QuantizeKVBlock(fk, keys.data(), k_[layer].data() + block * KVBlockBytes(fk));
  keys_quantized_[layer][block] = 1;
}

void KVStorage::Write(int64_t layer, const float* k, const float* v, const int64_t* slots, int64_t n,
                      const int32_t* positions) {
  const ScopedOpTimer timer(OpKind::kKVWrite);
  const int64_t kw = k_width(), vw = v_width(), bs = shape_.block_size, heads = shape_.num_kv_heads;
  const int64_t capacity = shape_.num_blocks * bs;
  const KVArrayFormat& fk = k_format_[layer];
  const KVArrayFormat& fv = v_format_[layer];
  const int64_t kblock = KVBlockBytes(fk), vblock = KVBlockBytes(fv);
  const bool uses_wide = UsesWide(layer);
  if (uses_wide) {
    // The previous step's queries are done with the blocks it filled.
    for (int64_t b : filled_[layer]) {
      int32_t& w = wide_index_[layer][b];
      if (w >= 0 && !sink_block_[layer][b]) {
        wide_free_[layer].push_back(w);
        w = -1;
      }
    }
    filled_[layer].clear();
  }
  const int64_t esize = DTypeBlockBytes(shape_.dtype);
  for (int64_t t = 0; t < n; ++t) {
    PAGODA_CHECK(slots[t] >= 0 && slots[t] < capacity) << "slot " << slots[t] << " of " << capacity;
  }
  if (!uses_wide && !fk.per_channel) {
    // Every token's rows go to its own slot: the tokens in parallel (a prefill writes thousands).
    ParallelFor(n, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t block = slots[t] / bs, offset = slots[t] % bs;
        for (int64_t h = 0; h < heads; ++h) {
          QuantizeKVRow(fk, k + t * kw + h * fk.head_dim, k_[layer].data() + block * kblock, offset, h);
          QuantizeKVRow(fv, v + t * vw + h * fv.head_dim, v_[layer].data() + block * vblock, offset, h);
        }
      }
    });
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const int64_t block = slots[t] / bs, offset = slots[t] % bs;
    const float* kt = k + t * kw;
    const float* vt = v + t * vw;
    if (uses_wide) {
      const bool sink = positions != nullptr && positions[t] < shape_.sink_tokens;
      if (offset == 0) {  // a new use of the block
        sink_block_[layer][block] = 0;
        keys_quantized_[layer][block] = 0;
        if (shape_.heavy_tokens > 0) {
          heavy_frozen_[layer][block] = 0;
          std::fill_n(mass_[layer].begin() + block * bs, bs, 0.0f);
          std::fill_n(mass_count_[layer].begin() + block * bs, bs, 0.0f);
          ClearHeavyRows(fk, k_[layer].data() + block * kblock);
          ClearHeavyRows(fv, v_[layer].data() + block * vblock);
        }
      }
      if (sink) sink_block_[layer][block] = 1;
      const bool want = fk.quant == KVQuant::kKivi2 || shape_.recent_tokens > 0 ||
                        shape_.heavy_tokens > 0 || sink;
      if (want || wide_index_[layer][block] >= 0) {
        const int64_t w = WideBlock(layer, block, offset);
        QuantizeRow(shape_.dtype, kt, wide_k_[layer].data() + (w * bs + offset) * kw * esize, kw);
        QuantizeRow(shape_.dtype, vt, wide_v_[layer].data() + (w * bs + offset) * vw * esize, vw);
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      if (!fk.per_channel) QuantizeKVRow(fk, kt + h * fk.head_dim, k_[layer].data() + block * kblock, offset, h);
      QuantizeKVRow(fv, vt + h * fv.head_dim, v_[layer].data() + block * vblock, offset, h);
    }
    if (uses_wide && offset == bs - 1) {
      if (fk.per_channel && !keys_quantized_[layer][block]) QuantizeFullKeys(layer, block);
      filled_[layer].push_back(block);
    }
  }
}

void KVStorage::ObserveQueries(int64_t layer, const float* q, int64_t num_heads, const int64_t* slots,
                               int64_t n, float scale) {
  if (shape_.heavy_tokens <= 0 || !UsesWide(layer)) return;
  const int64_t bs = shape_.block_size, heads = shape_.num_kv_heads, d = shape_.head_dim;
  const int64_t group = num_heads / heads, esize = DTypeBlockBytes(shape_.dtype);
  std::vector<float> keys(bs * heads * d), s(bs);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t block = slots[t] / bs, offset = slots[t] % bs;
    const int32_t w = wide_index_[layer][block];
    if (w < 0 || heavy_frozen_[layer][block]) continue;
    DequantizeRow(shape_.dtype, wide_k_[layer].data() + w * bs * k_width() * esize, keys.data(),
                  (offset + 1) * k_width());
    float* mass = &mass_[layer][block * bs];
    float* count = &mass_count_[layer][block * bs];
    for (int64_t h = 0; h < num_heads; ++h) {
      const float* qh = q + (t * num_heads + h) * d;
      const int64_t kvh = h / group;
      float m = -INFINITY;
      for (int64_t j = 0; j <= offset; ++j) {
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot += qh[i] * keys[(j * heads + kvh) * d + i];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j <= offset; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (int64_t j = 0; j <= offset; ++j) {
        mass[j] += s[j] / sum;
        count[j] += 1.0f;
      }
    }
  }
  // A block whose last query has been seen has all its mass: choose now, so that every later
  // query, in this step or after, reads the same rows however the prompt was chunked.
  for (int64_t t = 0; t < n; ++t) {
    const int64_t block = slots[t] / bs;
    if (slots[t] % bs == bs - 1 && !heavy_frozen_[layer][block] && wide_index_[layer][block] >= 0) {
      FreezeHeavyRows(layer, block);
    }
  }
}

void KVStorage::FreezeHeavyRows(int64_t layer, int64_t block) {
  const int64_t bs = shape_.block_size, k = shape_.heavy_tokens, esize = DTypeBlockBytes(shape_.dtype);
  const float* mass = &mass_[layer][block * bs];
  const float* count = &mass_count_[layer][block * bs];
  std::vector<int64_t> order(bs);
  for (int64_t i = 0; i < bs; ++i) order[i] = i;
  auto mean = [&](int64_t i) { return count[i] > 0 ? mass[i] / count[i] : 0.0f; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return mean(a) > mean(b); });
  order.resize(k);
  const int32_t w = wide_index_[layer][block];
  for (bool value : {false, true}) {
    const KVArrayFormat& f = value ? v_format_[layer] : k_format_[layer];
    const int64_t width = value ? v_width() : k_width();
    const auto& pool = value ? wide_v_[layer] : wide_k_[layer];
    std::vector<float> rows(k * width);
    for (int64_t i = 0; i < k; ++i) {
      DequantizeRow(shape_.dtype, pool.data() + (w * bs + order[i]) * width * esize, &rows[i * width], width);
    }
    auto& arr = value ? v_[layer] : k_[layer];
    SetHeavyRows(f, arr.data() + block * KVBlockBytes(f), order.data(), rows.data());
  }
  heavy_frozen_[layer][block] = 1;
}

void KVStorage::ReadSlot(int64_t layer, bool value, int64_t slot, float* out) const {
  const int64_t bs = shape_.block_size, block = slot / bs, offset = slot % bs;
  const KVArrayFormat& f = value ? v_format_[layer] : k_format_[layer];
  const bool wide = UsesWide(layer) && wide_index_[layer][block] >= 0 &&
                    (f.quant == KVQuant::kKivi2 || shape_.recent_tokens > 0 || sink_block_[layer][block]);
  const int64_t width = value ? v_width() : k_width();
  if (wide) {
    const auto& pool = value ? wide_v_[layer] : wide_k_[layer];
    DequantizeRow(shape_.dtype,
                  pool.data() + (wide_index_[layer][block] * bs + offset) * width * DTypeBlockBytes(shape_.dtype),
                  out, width);
    return;
  }
  const uint8_t* base = (value ? v_[layer] : k_[layer]).data() + block * KVBlockBytes(f);
  for (int64_t h = 0; h < shape_.num_kv_heads; ++h) DequantizeKVRow(f, base, offset, h, out + h * f.head_dim);
}

void KVStorage::ReleaseBlocks(std::span<const int32_t> blocks) {
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    if (!UsesWide(l)) continue;
    for (const int32_t b : blocks) {
      PAGODA_CHECK(b >= 0 && b < shape_.num_blocks) << "ReleaseBlocks: block " << b;
      std::erase(filled_[l], b);
      sink_block_[l][b] = 0;
      if (wide_index_[l][b] >= 0) {
        wide_free_[l].push_back(wide_index_[l][b]);
        wide_index_[l][b] = -1;
      }
    }
  }
}

void KVStorage::CopyBlock(int64_t src, int64_t dst) {
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    const int64_t kb = KVBlockBytes(k_format_[l]), vb = KVBlockBytes(v_format_[l]);
    std::memcpy(k_[l].data() + dst * kb, k_[l].data() + src * kb, kb);
    std::memcpy(v_[l].data() + dst * vb, v_[l].data() + src * vb, vb);
    if (!UsesWide(l)) continue;
    std::erase(filled_[l], dst);  // a new use: its copy (below) is not the filled block's
    sink_block_[l][dst] = sink_block_[l][src];
    keys_quantized_[l][dst] = keys_quantized_[l][src];
    if (shape_.heavy_tokens > 0) {
      const int64_t bs = shape_.block_size;
      heavy_frozen_[l][dst] = heavy_frozen_[l][src];
      std::copy_n(mass_[l].begin() + src * bs, bs, mass_[l].begin() + dst * bs);
      std::copy_n(mass_count_[l].begin() + src * bs, bs, mass_count_[l].begin() + dst * bs);
    }
    if (wide_index_[l][src] < 0) {
      if (wide_index_[l][dst] >= 0) {
        wide_free_[l].push_back(wide_index_[l][dst]);
        wide_index_[l][dst] = -1;
      }
      continue;
    }
    const int64_t w_dst = WideBlock(l, dst, 0);
    const int64_t w_src = wide_index_[l][src];
    const int64_t esize = DTypeBlockBytes(shape_.dtype);
    const int64_t kn = shape_.block_size * k_width() * esize, vn = shape_.block_size * v_width() * esize;
    std::memcpy(wide_k_[l].data() + w_dst * kn, wide_k_[l].data() + w_src * kn, kn);
    std::memcpy(wide_v_[l].data() + w_dst * vn, wide_v_[l].data() + w_src * vn, vn);
  }
}

void KVStorage::FillMlaAttentionParams(int64_t layer, MlaAttentionParams* p) const {
  PAGODA_CHECK(shape_.num_kv_heads == 1 && !UsesWide(layer))
      << "FillMlaAttentionParams: not an MLA cache (num_kv_heads " << shape_.num_kv_heads << ")";
  p->latent_cache = k_[layer].data();
  p->rope_cache = v_[layer].data();
  p->kv_dtype = shape_.dtype;
  p->block_size = shape_.block_size;
  p->latent_format = k_format_[layer];
  p->rope_format = v_format_[layer];
}

void KVStorage::FillAttentionParams(int64_t layer, PagedAttentionParams* p) const {
  p->k_cache = k_[layer].data();
  p->v_cache = v_[layer].data();
  p->kv_dtype = shape_.dtype;
  p->k_format = k_format_[layer];
  p->v_format = v_format_[layer];
  p->wide_dtype = shape_.dtype;
  if (UsesWide(layer)) {
    p->k_wide = wide_k_[layer].data();
    p->v_wide = wide_v_[layer].data();
    p->wide_index = wide_index_[layer].data();
    p->sink_tokens = shape_.sink_tokens;
    p->recent_tokens = shape_.recent_tokens;
    // kivi2: the residual; heavy rows: a block's choice is made only once it is full, so its
    // own queries read it wide, whichever step the choice happened in.
    p->own_block_wide = k_format_[layer].quant == KVQuant::kKivi2 || shape_.heavy_tokens > 0;
  } else {
    p->k_wide = p->v_wide = nullptr;
    p->wide_index = nullptr;
    p->sink_tokens = p->recent_tokens = 0;
    p->own_block_wide = false;
  }
}

}  // namespace pagoda
