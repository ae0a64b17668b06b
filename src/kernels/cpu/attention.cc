#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/vec.h"

namespace pagoda {
namespace {

// Converts one cached row of head_dim values to f32.
inline void LoadRow(const void* cache, DType t, int64_t index, int64_t d, float* out) {
  switch (t) {
    case DType::kF32: std::memcpy(out, static_cast<const float*>(cache) + index, d * 4); return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(cache) + index;
      for (int64_t i = 0; i < d; ++i) out[i] = Bf16ToF32(s[i]);
      return;
    }
    default: {
      const uint16_t* s = static_cast<const uint16_t*>(cache) + index;
      for (int64_t i = 0; i < d; ++i) out[i] = F16ToF32(s[i]);
      return;
    }
  }
}

// Where one query's keys come from: the block arrays in their formats, or a block's wide copy.
struct KVReader {
  const PagedAttentionParams& p;
  KVArrayFormat fk, fv;
  int64_t k_block_bytes, v_block_bytes;

  explicit KVReader(const PagedAttentionParams& params) : p(params), fk(params.k_format), fv(params.v_format) {
    for (KVArrayFormat* f : {&fk, &fv}) {
      if (f->quant == KVQuant::kNone) f->dtype = p.kv_dtype;
      f->block_size = p.block_size;
      f->num_heads = p.num_kv_heads;
      f->head_dim = p.head_dim;
    }
    k_block_bytes = KVBlockBytes(fk);
    v_block_bytes = KVBlockBytes(fv);
  }

  bool Wide(int64_t key, int64_t pos, int32_t block) const {
    if (p.wide_index == nullptr || p.wide_index[block] < 0) return false;
    if (key < p.sink_tokens) return true;
    if (key / p.block_size != pos / p.block_size) return false;
    return p.own_block_wide || pos - key < p.recent_tokens;
  }

  // K and V rows of `key` for the KV head kvh of a query at `pos`.
  void Load(int64_t key, int64_t pos, const int32_t* table, int64_t kvh, float* k, float* v) const {
    const int64_t d = p.head_dim;
    const int32_t block = table[key / p.block_size];
    const int64_t offset = key % p.block_size;
    if (Wide(key, pos, block)) {
      const int64_t index = ((int64_t{p.wide_index[block]} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      LoadRow(p.k_wide, p.wide_dtype, index, d, k);
      LoadRow(p.v_wide, p.wide_dtype, index, d, v);
      return;
    }
    if (fk.quant == KVQuant::kNone && fv.quant == KVQuant::kNone) {
      const int64_t index = ((int64_t{block} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      LoadRow(p.k_cache, fk.dtype, index, d, k);
      LoadRow(p.v_cache, fv.dtype, index, d, v);
      return;
    }
    DequantizeKVRow(fk, static_cast<const uint8_t*>(p.k_cache) + block * k_block_bytes, offset, kvh, k);
    DequantizeKVRow(fv, static_cast<const uint8_t*>(p.v_cache) + block * v_block_bytes, offset, kvh, v);
  }
};

struct Scratch {
  std::vector<float> k, v, s, acc, m, l;
};

void AttendOne(const PagedAttentionParams& p, const KVReader& reader, int64_t t, int64_t kvh, Scratch& w) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t pos = p.positions[t];
  const int64_t lo = AttentionWindowStart(pos, p.sliding_window);
  const int32_t* table = p.block_tables[t];
  w.k.resize(kAttentionTile * d);
  w.v.resize(kAttentionTile * d);
  w.s.resize(group * kAttentionTile);
  w.acc.assign(group * d, 0.0f);
  w.m.assign(group, -INFINITY);
  w.l.assign(group, 0.0f);
  const float* q0 = p.q + (t * p.num_heads + kvh * group) * d;

  for (int64_t tile = lo / kAttentionTile * kAttentionTile; tile <= pos; tile += kAttentionTile) {
    const int64_t a = std::max(tile, lo);
    const int64_t b = std::min(tile + kAttentionTile, pos + 1);
    const int64_t n = b - a;
    for (int64_t j = 0; j < n; ++j) reader.Load(a + j, pos, table, kvh, &w.k[j * d], &w.v[j * d]);
    for (int64_t g = 0; g < group; ++g) {
      float* s = &w.s[g * kAttentionTile];
      float tile_max = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = cpu::Dot(q0 + g * d, &w.k[j * d], d) * p.scale;
        tile_max = std::max(tile_max, s[j]);
      }
      const float m_new = std::max(w.m[g], tile_max);
      const float correction = std::exp(w.m[g] - m_new);  // exp(-inf) = 0 on the first tile
      float* acc = &w.acc[g * d];
      cpu::Scale(correction, acc, d);
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float e = std::exp(s[j] - m_new);
        sum += e;
        cpu::Axpy(e, &w.v[j * d], acc, d);
      }
      w.l[g] = w.l[g] * correction + sum;
      w.m[g] = m_new;
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* o = p.out + (t * p.num_heads + kvh * group + g) * d;
    const float inv = 1.0f / w.l[g];
    for (int64_t i = 0; i < d; ++i) o[i] = w.acc[g * d + i] * inv;
  }
}

}  // namespace

void PagedAttention(const PagedAttentionParams& p) {
  const int64_t items = p.num_tokens * p.num_kv_heads;
  const KVReader reader(p);
  ParallelFor(items, 1, [&](int64_t begin, int64_t end) {
    Scratch w;
    for (int64_t i = begin; i < end; ++i) AttendOne(p, reader, i / p.num_kv_heads, i % p.num_kv_heads, w);
  });
}

}  // namespace pagoda
