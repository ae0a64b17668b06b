#include "kernels/ref/attention_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

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
}  // namespace

void PagedAttention(const PagedAttentionParams& p) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    const int64_t lo = AttentionWindowStart(pos, p.sliding_window);
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const int64_t kvh = h / group;
      const float* q = p.q + (t * p.num_heads + h) * d;
      std::vector<double> s(pos - lo + 1);
      double m = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t slot = int64_t{p.block_tables[t][j / p.block_size]} * p.block_size + j % p.block_size;
        const int64_t base = (slot * p.num_kv_heads + kvh) * d;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double{q[i]} * LoadKV(p.k_cache, p.kv_dtype, base + i);
        s[j - lo] = dot * p.scale;
        m = std::max(m, s[j - lo]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      std::vector<double> acc(d, 0.0);
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t slot = int64_t{p.block_tables[t][j / p.block_size]} * p.block_size + j % p.block_size;
        const int64_t base = (slot * p.num_kv_heads + kvh) * d;
        for (int64_t i = 0; i < d; ++i) acc[i] += s[j - lo] * LoadKV(p.v_cache, p.kv_dtype, base + i);
      }
      float* o = p.out + (t * p.num_heads + h) * d;
      for (int64_t i = 0; i < d; ++i) o[i] = static_cast<float>(acc[i] / l);
    }
  }
}

}  // namespace pagoda::ref
