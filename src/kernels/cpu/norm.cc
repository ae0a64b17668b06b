#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace pagoda {

// Both run on NumThreads() threads over rows / chunks of elements; every value is computed
// the same way whatever the split.
void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, double eps, float* y) {
  ParallelFor(num_rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    float* yr = y + r * n;
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
  }
  });
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  ParallelFor(n, 16384, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

}  // namespace pagoda
