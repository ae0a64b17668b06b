#include "kernels/ref/mla_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace

void MlaAttention(const MlaAttentionParams& p) {
  const int64_t r = p.kv_lora_rank, dr = p.rope_dim;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    std::vector<int64_t> slots(pos + 1);
    for (int64_t j = 0; j <= pos; ++j) {
      slots[j] = int64_t{p.block_tables[t][j / p.block_size]} * p.block_size + j % p.block_size;
    }
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const float* q = p.q + (t * p.num_heads + h) * p.q_stride();
      std::vector<double> s(pos + 1);
      double m = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < r; ++i)
          dot += double{q[i]} * Load(p.latent_cache, p.kv_dtype, slots[j] * r + i);
        for (int64_t i = 0; i < dr; ++i)
          dot += double{q[r + i]} * Load(p.rope_cache, p.kv_dtype, slots[j] * dr + i);
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      std::vector<double> acc(r, 0.0);
      for (int64_t j = 0; j <= pos; ++j) {
        for (int64_t i = 0; i < r; ++i)
          acc[i] += s[j] * Load(p.latent_cache, p.kv_dtype, slots[j] * r + i);
      }
      float* o = p.out + (t * p.num_heads + h) * r;
      for (int64_t i = 0; i < r; ++i) o[i] = static_cast<float>(acc[i] / l);
    }
  }
}

}  // namespace pagoda::ref
