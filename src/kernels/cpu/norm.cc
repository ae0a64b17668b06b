#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/matmul_internal.h"

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

namespace {

// silu(g) * u over one run of n values, in chunks through the vector exp.
void SiluRun(const float* gate, const float* up, int64_t n, float* out) {
  static const auto exp_fn = cpu::AttentionTileAt(cpu::DefaultAttentionIsa()).exp;
  constexpr int64_t kChunk = 256;
  float e[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) e[i] = -gate[i0 + i];
    exp_fn(e, e, m);
    for (int64_t i = 0; i < m; ++i) {
      const float g = gate[i0 + i];
      out[i0 + i] = g / (1.0f + e[i]) * up[i0 + i];
    }
  }
}

}  // namespace

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  ParallelFor((n + 1023) / 1024, 16, [&](int64_t c0, int64_t c1) {
    const int64_t i0 = c0 * 1024, i1 = std::min(n, c1 * 1024);
    SiluRun(gate + i0, up + i0, i1 - i0, out + i0);
  });
}

void SiluMulRows(const float* gu, int64_t rows, int64_t n, float* out) {
  ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) SiluRun(gu + r * 2 * n, gu + r * 2 * n + n, n, out + r * n);
  });
}

}  // namespace pagoda
