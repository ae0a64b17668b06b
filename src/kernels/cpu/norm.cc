#include "kernels/cpu/norm.h"

#include <cmath>

namespace pagoda {

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, double eps, float* y) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    float* yr = y + r * n;
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace pagoda
