#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/cpu/vec.h"

namespace pagoda {
namespace {

// Row `slot` (= block * block_size + offset) of one cache array, d values, into out f32:
// wide arrays by element, quantized ones through the shared row dequantizer (one row at a
// time: the cache is never dequantized as a whole).
inline void LoadCacheRow(const void* cache, const KVArrayFormat& f, DType wide, int64_t slot,
                         int64_t d, float* out) {
  if (f.quant == KVQuant::kNone) {
    cpu::LoadWideRow(cache, wide, slot * d, d, out);
    return;
  }
  const int64_t block = slot / f.block_size, offset = slot % f.block_size;
  DequantizeKVRow(f, static_cast<const uint8_t*>(cache) + block * KVBlockBytes(f), offset, 0, out);
}

struct Scratch {
  std::vector<float> c, pe, s, acc, m, l;
};

// Heads [h0, h1) of token t.
void AttendHeads(const MlaAttentionParams& p, int64_t t, int64_t h0, int64_t h1, Scratch& w) {
  const int64_t r = p.kv_lora_rank, dr = p.rope_dim, heads = h1 - h0;
  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  w.c.resize(kMlaAttentionTile * r);
  w.pe.resize(kMlaAttentionTile * dr);
  w.s.resize(kMlaAttentionTile);
  w.acc.assign(heads * r, 0.0f);
  w.m.assign(heads, -INFINITY);
  w.l.assign(heads, 0.0f);

  for (int64_t a = 0; a <= pos; a += kMlaAttentionTile) {
    const int64_t n = std::min(a + kMlaAttentionTile, pos + 1) - a;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = a + j;
      const int64_t slot = int64_t{table[key / p.block_size]} * p.block_size + key % p.block_size;
      LoadCacheRow(p.latent_cache, p.latent_format, p.kv_dtype, slot, r, &w.c[j * r]);
      LoadCacheRow(p.rope_cache, p.rope_format, p.kv_dtype, slot, dr, &w.pe[j * dr]);
    }
    for (int64_t g = 0; g < heads; ++g) {
      const float* q = p.q + (t * p.num_heads + h0 + g) * p.q_stride();
      float* s = w.s.data();
      for (int64_t j = 0; j < n; ++j) {
        s[j] = (cpu::Dot(q, &w.c[j * r], r) + cpu::Dot(q + r, &w.pe[j * dr], dr)) * p.scale;
      }
      cpu::OnlineSoftmaxTile(s, n, w.c.data(), r, &w.m[g], &w.l[g], &w.acc[g * r]);
    }
  }
  for (int64_t g = 0; g < heads; ++g) {
    float* o = p.out + (t * p.num_heads + h0 + g) * r;
    const float inv = 1.0f / w.l[g];
    for (int64_t i = 0; i < r; ++i) o[i] = w.acc[g * r + i] * inv;
  }
}

}  // namespace

void CheckMlaFormats(const MlaAttentionParams& p) {
  for (auto [f, d, name] : {std::tuple{&p.latent_format, p.kv_lora_rank, "latent"},
                            std::tuple{&p.rope_format, p.rope_dim, "rope"}}) {
    if (f->quant == KVQuant::kNone) continue;
    PAGODA_CHECK(f->block_size == p.block_size && f->num_heads == 1 && f->head_dim == d &&
                 !f->per_channel)
        << "MLA " << name << " format: block_size " << f->block_size << ", num_heads "
        << f->num_heads << ", head_dim " << f->head_dim << " (want " << p.block_size << ", 1, "
        << d << ", per-token)";
  }
}

void MlaAttention(const MlaAttentionParams& p) {
  CheckMlaFormats(p);
  const int64_t chunks = (p.num_heads + kMlaHeadsPerItem - 1) / kMlaHeadsPerItem;
  ParallelFor(p.num_tokens * chunks, 1, [&](int64_t begin, int64_t end) {
    Scratch w;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h0 = (i % chunks) * kMlaHeadsPerItem;
      AttendHeads(p, i / chunks, h0, std::min(h0 + kMlaHeadsPerItem, p.num_heads), w);
    }
  });
}

}  // namespace pagoda
