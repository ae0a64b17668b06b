#include "kernels/ref/attention_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kv/kv_codec.h"

namespace pagoda::ref {
namespace {
double LoadKV(const void* base, DType t, int64_t index) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[index];
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(base)[index]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(base)[index]);
    default: return NAN;
  }
}
// Reads rows as the contract says (wide copy or block codes); the codecs are the shared
// ones (kv/kv_codec.h, tested on their own), the arithmetic is double.
struct Rows {
  const PagedAttentionParams& p;
  KVArrayFormat fk, fv;
  explicit Rows(const PagedAttentionParams& params) : p(params), fk(params.k_format), fv(params.v_format) {
    for (KVArrayFormat* f : {&fk, &fv}) {
      if (f->quant == KVQuant::kNone) f->dtype = p.kv_dtype;
      f->block_size = p.block_size;
      f->num_heads = p.num_kv_heads;
      f->head_dim = p.head_dim;
    }
  }
  std::vector<double> Get(bool value, int64_t key, int64_t pos, const int32_t* table, int64_t kvh) const {
    const int64_t d = p.head_dim;
    const int32_t block = table[key / p.block_size];
    const int64_t offset = key % p.block_size;
    std::vector<double> out(d);
    const bool has_wide = p.wide_index != nullptr && p.wide_index[block] >= 0;
    const bool same_block = key / p.block_size == pos / p.block_size;
    if (has_wide && (key < p.sink_tokens || (same_block && (p.own_block_wide || pos - key < p.recent_tokens)))) {
      const int64_t base = ((int64_t{p.wide_index[block]} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      for (int64_t i = 0; i < d; ++i) out[i] = LoadKV(value ? p.v_wide : p.k_wide, p.wide_dtype, base + i);
      return out;
    }
    const KVArrayFormat& f = value ? fv : fk;
    if (f.quant == KVQuant::kNone) {
      const int64_t base = ((int64_t{block} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      for (int64_t i = 0; i < d; ++i) out[i] = LoadKV(value ? p.v_cache : p.k_cache, f.dtype, base + i);
      return out;
    }
    std::vector<float> row(d);
    DequantizeKVRow(f, static_cast<const uint8_t*>(value ? p.v_cache : p.k_cache) + block * KVBlockBytes(f),
                    offset, kvh, row.data());
    for (int64_t i = 0; i < d; ++i) out[i] = row[i];
    return out;
  }
};
}  // namespace

void PagedAttention(const PagedAttentionParams& p) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const Rows rows(p);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    const int64_t lo = AttentionWindowStart(pos, p.sliding_window);
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const int64_t kvh = h / group;
      const float* q = p.q + (t * p.num_heads + h) * d;
      std::vector<double> s(pos - lo + 1);
      double m = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const std::vector<double> key = rows.Get(false, j, pos, p.block_tables[t], kvh);
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double{q[i]} * key[i];
        s[j - lo] = dot * p.scale;
        m = std::max(m, s[j - lo]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      std::vector<double> acc(d, 0.0);
      for (int64_t j = lo; j <= pos; ++j) {
        const std::vector<double> val = rows.Get(true, j, pos, p.block_tables[t], kvh);
        for (int64_t i = 0; i < d; ++i) acc[i] += s[j - lo] * val[i];
      }
      float* o = p.out + (t * p.num_heads + h) * d;
      for (int64_t i = 0; i < d; ++i) o[i] = static_cast<float>(acc[i] / l);
    }
  }
}

}  // namespace pagoda::ref
