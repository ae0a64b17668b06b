#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace pagoda {

void ApplyRope(const RopeParams& rope, const int32_t* positions, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x) {
  const int64_t half = rope.dim / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * rope.inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(angle) * rope.magnitude);
      sin_t[i] = static_cast<float>(std::sin(angle) * rope.magnitude);
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_stride + offset;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = rope.interleaved ? 2 * i : i;
        const int64_t i1 = rope.interleaved ? 2 * i + 1 : i + half;
        const float a = v[i0], b = v[i1];
        v[i0] = a * cos_t[i] - b * sin_t[i];
        v[i1] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

}  // namespace pagoda
