#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kv/kv_codec.h"

namespace pagoda {
namespace {

// Row `slot` (= block * block_size + offset) of one cache array, d values: wide arrays in
// place, quantized ones dequantized into buf through the shared row dequantizer (one row at a
// time: the cache is never dequantized as a whole).
inline cpu::TileRow CacheRow(const void* cache, const KVArrayFormat& f, DType wide, int64_t slot,
                             int64_t d, float* buf) {
  if (f.quant == KVQuant::kNone) {
    return {static_cast<const uint8_t*>(cache) + slot * d * DTypeBlockBytes(wide), wide};
  }
  const int64_t block = slot / f.block_size, offset = slot % f.block_size;
  DequantizeKVRow(f, static_cast<const uint8_t*>(cache) + block * KVBlockBytes(f), offset, 0, buf);
  return {buf, DType::kF32};
}

struct Scratch {
  std::vector<float> c, pe;      // dequantized rows of a tile
  cpu::TileStateBuffers state;  // per head m, l, acc
  cpu::TileRow c_rows[cpu::kTileKeys], pe_rows[cpu::kTileKeys];
  cpu::TileScratch tile;
};

static_assert(kMlaAttentionTile <= cpu::kTileKeys);

// Heads [h0, h1) of token t: one tile step for all of them (they share every row).
void AttendHeads(const MlaAttentionParams& p, const cpu::AttentionTileKernels& kernels, int64_t t,
                 int64_t h0, int64_t h1, Scratch& w) {
  const int64_t r = p.kv_lora_rank, dr = p.rope_dim, heads = h1 - h0;
  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  w.c.resize(kMlaAttentionTile * r);  // used by quantized rows only
  w.pe.resize(kMlaAttentionTile * dr);
  const cpu::AttentionTileState st = w.state.Reset(heads, r);
  cpu::AttentionTileArgs a;
  a.heads = heads;
  a.q = p.q + (t * p.num_heads + h0) * p.q_stride();
  a.q_stride = p.q_stride();
  a.dk0 = r;
  a.dk1 = dr;
  a.dv = r;
  a.scale = p.scale;
  a.k0 = w.c_rows;
  a.k1 = w.pe_rows;
  a.v = w.c_rows;  // the latent is both the key (with k_pe) and the value
  float* scratch = w.tile.Get(cpu::TileScratchFloats(heads, r + dr));

  for (int64_t first = 0; first <= pos; first += kMlaAttentionTile) {
    a.n = std::min(first + kMlaAttentionTile, pos + 1) - first;
    for (int64_t j = 0; j < a.n; ++j) {
      const int64_t key = first + j;
      const int64_t slot = int64_t{table[key / p.block_size]} * p.block_size + key % p.block_size;
      w.c_rows[j] = CacheRow(p.latent_cache, p.latent_format, p.kv_dtype, slot, r, w.c.data() + j * r);
      w.pe_rows[j] = CacheRow(p.rope_cache, p.rope_format, p.kv_dtype, slot, dr, w.pe.data() + j * dr);
    }
    kernels.step(a, st, scratch);
  }
  for (int64_t g = 0; g < heads; ++g) {
    float* o = p.out + (t * p.num_heads + h0 + g) * r;
    const float inv = 1.0f / st.l[g];
    for (int64_t i = 0; i < r; ++i) o[i] = st.acc[g * st.acc_stride + i] * inv;
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
  const ScopedOpTimer timer(OpKind::kAttention);
  MlaAttentionAt(cpu::DefaultAttentionIsa(), p);
}

void MlaAttentionAt(matmul_internal::IsaLevel level, const MlaAttentionParams& p) {
  CheckMlaFormats(p);
  const cpu::AttentionTileKernels kernels = cpu::AttentionTileAt(level);
  const int64_t chunks = (p.num_heads + kMlaHeadsPerItem - 1) / kMlaHeadsPerItem;
  ParallelFor(p.num_tokens * chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch w;  // kept per thread between calls: no allocation per layer and step
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h0 = (i % chunks) * kMlaHeadsPerItem;
      AttendHeads(p, kernels, i / chunks, h0, std::min(h0 + kMlaHeadsPerItem, p.num_heads), w);
    }
  });
}

}  // namespace pagoda
