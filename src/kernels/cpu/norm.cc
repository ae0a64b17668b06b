#include "kernels/cpu/norm.h"

// Same bits at every clone: no fused multiply-add where the source has a multiply and an add.
#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cmath>

#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/matmul_internal.h"

namespace pagoda {

// Everything runs on NumThreads() threads over rows / chunks of elements; every value is
// computed the same way whatever the split. The loops are cloned per ISA (norm.h); not under
// the sanitizers, whose start-up runs after the clones' resolvers.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define PAGODA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PAGODA_CLONES
#endif

namespace {

PAGODA_CLONES void RmsNormRow(const float* x, const float* weight, int64_t n, double eps, float* y) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double ss = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * inv * weight[j];
}

PAGODA_CLONES void AddRun(const float* h, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] += h[i];
}

}  // namespace

void AddInPlaceRun(const float* h, int64_t n, float* x) { AddRun(h, n, x); }

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, double eps, float* y) {
  const ScopedOpTimer timer(OpKind::kNorm);
  ParallelFor(num_rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) RmsNormRow(x + r * n, weight, n, eps, y + r * n);
  });
}

void AddInPlace(const float* h, int64_t n, float* x) {
  const ScopedOpTimer timer(OpKind::kActivation);
  ParallelFor((n + 4095) / 4096, 4, [&](int64_t c0, int64_t c1) {
    const int64_t i0 = c0 * 4096, i1 = std::min(n, c1 * 4096);
    AddRun(h + i0, i1 - i0, x + i0);
  });
}

namespace {

// silu(g) * u over one run of n values, in chunks through the vector exp.
PAGODA_CLONES void SiluRun(const float* gate, const float* up, int64_t n, float* out) {
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

void SiluMulRun(const float* gate, const float* up, int64_t n, float* out) { SiluRun(gate, up, n, out); }

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const ScopedOpTimer timer(OpKind::kActivation);
  ParallelFor((n + 1023) / 1024, 16, [&](int64_t c0, int64_t c1) {
    const int64_t i0 = c0 * 1024, i1 = std::min(n, c1 * 1024);
    SiluRun(gate + i0, up + i0, i1 - i0, out + i0);
  });
}

void SiluMulRows(const float* gu, int64_t rows, int64_t n, float* out) {
  const ScopedOpTimer timer(OpKind::kActivation);
  ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) SiluRun(gu + r * 2 * n, gu + r * 2 * n + n, n, out + r * n);
  });
}

}  // namespace pagoda
