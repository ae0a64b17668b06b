#include "kernels/ref/mla_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kv/kv_codec.h"
#include "kernels/cpu/mla_attention.h"

namespace pagoda::ref {
namespace {

double Load(const void* base, DType t, int64_t index) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[index];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(base)[index]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(base)[index]);
    default:
      return NAN;
  }
}

// Row `slot` of one array as doubles: wide elements exactly, quantized rows through the
// shared row dequantizer (code x stored scale is exact in f32), widened to double.
std::vector<double> LoadRowD(const void* cache, const KVArrayFormat& f, DType wide, int64_t slot,
                             int64_t d) {
  std::vector<double> out(d);
  if (f.quant == KVQuant::kNone) {
    for (int64_t i = 0; i < d; ++i) out[i] = Load(cache, wide, slot * d + i);
    return out;
  }
  std::vector<float> row(d);
  DequantizeKVRow(f, static_cast<const uint8_t*>(cache) + (slot / f.block_size) * KVBlockBytes(f),
                  slot % f.block_size, 0, row.data());
  for (int64_t i = 0; i < d; ++i) out[i] = row[i];
  return out;
}

}  // namespace

void MlaAttention(const MlaAttentionParams& p) {
  CheckMlaFormats(p);
  const int64_t r = p.kv_lora_rank, dr = p.rope_dim;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    std::vector<int64_t> slots(pos + 1);
    for (int64_t j = 0; j <= pos; ++j) {
      slots[j] = int64_t{p.block_tables[t][j / p.block_size]} * p.block_size + j % p.block_size;
    }
    std::vector<std::vector<double>> c(pos + 1), pe(pos + 1);
    for (int64_t j = 0; j <= pos; ++j) {
      c[j] = LoadRowD(p.latent_cache, p.latent_format, p.kv_dtype, slots[j], r);
      pe[j] = LoadRowD(p.rope_cache, p.rope_format, p.kv_dtype, slots[j], dr);
    }
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const float* q = p.q + (t * p.num_heads + h) * p.q_stride();
      std::vector<double> s(pos + 1);
      double m = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < r; ++i)
          dot += double{q[i]} * c[j][i];
        for (int64_t i = 0; i < dr; ++i)
          dot += double{q[r + i]} * pe[j][i];
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      std::vector<double> acc(r, 0.0);
      for (int64_t j = 0; j <= pos; ++j) {
        for (int64_t i = 0; i < r; ++i)
          acc[i] += s[j] * c[j][i];
      }
      float* o = p.out + (t * p.num_heads + h) * r;
      for (int64_t i = 0; i < r; ++i) o[i] = static_cast<float>(acc[i] / l);
    }
  }
}

}  // namespace pagoda::ref
