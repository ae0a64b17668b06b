// The pieces every CPU attention kernel shares (paged MHA/GQA/MQA and MLA): loading one
// wide cache row, and the FlashAttention online-softmax update of one tile. Written once so
// the kernels keep the same arithmetic, in the same order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/vec.h"

namespace pagoda::cpu {

// d values of a wide (f32 / bf16 / f16) cache array starting at element `index`, as f32.
inline void LoadWideRow(const void* cache, DType t, int64_t index, int64_t d, float* out) {
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

// One tile of keys for one query head: s[0, n) are the scaled scores (overwritten with
// their exponentials), rows[j * d, (j + 1) * d) the value row of key j. Updates the running
// max m, sum l and unnormalized accumulator acc[0, d) (m = -inf and l = 0 before the first
// tile; the output is acc / l after the last).
inline void OnlineSoftmaxTile(float* s, int64_t n, const float* rows, int64_t d, float* m, float* l,
                              float* acc) {
  float tile_max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) tile_max = std::max(tile_max, s[j]);
  const float m_new = std::max(*m, tile_max);
  const float correction = std::exp(*m - m_new);  // exp(-inf) = 0 on the first tile
  Scale(correction, acc, d);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = std::exp(s[j] - m_new);
    sum += e;
    Axpy(e, rows + j * d, acc, d);
  }
  *l = *l * correction + sum;
  *m = m_new;
}

}  // namespace pagoda::cpu
