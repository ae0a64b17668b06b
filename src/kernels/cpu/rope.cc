#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "core/op_profile.h"
#include "core/parallel.h"

namespace pagoda {

RopeTable MakeRopeTable(const RopeParams& rope, const int32_t* positions, int64_t num_tokens) {
  RopeTable t;
  FillRopeTable(rope, positions, num_tokens, &t);
  return t;
}

void FillRopeTable(const RopeParams& rope, const int32_t* positions, int64_t num_tokens, RopeTable* table) {
  RopeTable& t = *table;
  t.half = rope.dim / 2;
  t.cos.resize(num_tokens * t.half);
  t.sin.resize(num_tokens * t.half);
  ParallelFor(num_tokens, std::max<int64_t>(1, 256 / std::max<int64_t>(t.half, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t tok = t0; tok < t1; ++tok) {
      for (int64_t i = 0; i < t.half; ++i) {
        const double angle = static_cast<double>(positions[tok]) * rope.inv_freq[i];
        t.cos[tok * t.half + i] = static_cast<float>(std::cos(angle) * rope.magnitude);
        t.sin[tok * t.half + i] = static_cast<float>(std::sin(angle) * rope.magnitude);
      }
    }
  });
}

void ApplyRope(const RopeParams& rope, const RopeTable& table, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x) {
  const ScopedOpTimer timer(OpKind::kRope);
  const int64_t half = table.half;
  ParallelFor(num_tokens, std::max<int64_t>(1, 4096 / std::max<int64_t>(num_heads * half, 1)),
              [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cos_t = table.cos.data() + t * half;
      const float* sin_t = table.sin.data() + t * half;
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
  });
}

void ApplyRope(const RopeParams& rope, const int32_t* positions, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x) {
  ApplyRope(rope, MakeRopeTable(rope, positions, num_tokens), num_tokens, num_heads, head_stride,
            offset, x);
}

}  // namespace pagoda
