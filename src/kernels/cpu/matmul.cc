#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"

namespace pagoda {
namespace matmul_internal {

std::string_view IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kGeneric: return "generic";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

bool IsaLevelSupported(IsaLevel level) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (level) {
    case IsaLevel::kGeneric: return true;
    case IsaLevel::kAvx2: return f.avx2 && f.fma && f.f16c;
    case IsaLevel::kAvx512:
      return IsaLevelSupported(IsaLevel::kAvx2) && f.avx512f && f.avx512bw && f.avx512dq &&
             f.avx512vl && f.avx512_vnni;
  }
  return false;
}

IsaLevel BestIsaLevel() {
  for (IsaLevel l : {IsaLevel::kAvx512, IsaLevel::kAvx2}) {
    if (IsaLevelSupported(l)) return l;
  }
  return IsaLevel::kGeneric;
}

IsaLevel DefaultIsaLevel() {
  static const IsaLevel level = [] {
    IsaLevel best = BestIsaLevel();
    const char* env = std::getenv("PAGODA_MATMUL_ISA");
    if (env == nullptr || *env == '\0') return best;
    const std::string s(env);
    IsaLevel want = best;
    if (s == "generic") want = IsaLevel::kGeneric;
    if (s == "avx2") want = IsaLevel::kAvx2;
    if (s == "avx512") want = IsaLevel::kAvx512;
    return static_cast<IsaLevel>(std::min(static_cast<int>(want), static_cast<int>(best)));
  }();
  return level;
}

namespace {

MatMulRowsFn RowsFn(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx512: return &MatMulRowsAvx512;
    case IsaLevel::kAvx2: return &MatMulRowsAvx2;
    case IsaLevel::kGeneric: break;
  }
  return &MatMulRowsGeneric;
}

void CheckSupported(const WeightMatrix& w) {
  switch (w.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return;
    case DType::kQ8_0:
    case DType::kQ4_0:
      if (w.cols % 32 != 0) {
        ThrowInvalidArgument("MatMul: " + std::string(DTypeName(w.dtype)) + " weight with " +
                             std::to_string(w.cols) + " columns (needs a multiple of 32)");
      }
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      if (w.cols % 256 != 0) {
        ThrowInvalidArgument("MatMul: " + std::string(DTypeName(w.dtype)) + " weight with " +
                             std::to_string(w.cols) + " columns (needs a multiple of 256)");
      }
      return;
    default:
      ThrowUnsupported("MatMul: weight dtype " + std::string(DTypeName(w.dtype)) +
                       " has no CPU kernel (use f32, f16, bf16, q8_0, q4_0 or a K-quant)");
  }
}

bool PackedUsable(const WeightMatrix& w) {
  const PackedWeights* p = w.packed;
  return p != nullptr && p->source == w.data && p->dtype == w.dtype && p->rows == w.rows &&
         p->cols == w.cols;
}

// The packed kernel for these panels at `level`: the one they were shaped for when the
// level allows it, else the portable one (which takes any panel shape).
PackedRowsFn PackedFn(IsaLevel level, const PackedWeights& pw) {
  const auto packed_level = static_cast<IsaLevel>(pw.isa_level);
  if (static_cast<int>(level) >= static_cast<int>(packed_level)) {
    const bool quantized = pw.format != PackedWeights::Format::kFloat;
    if (packed_level == IsaLevel::kAvx512 && pw.panel_rows == (quantized ? 16 : 32)) return &PackedRowsAvx512;
    if (packed_level == IsaLevel::kAvx2 && !quantized && pw.panel_rows == 16) return &PackedRowsAvx2;
  }
  return &PackedRowsGeneric;
}

void MatMulPacked(IsaLevel level, const PackedWeights& pw, const float* x, int64_t num_tokens,
                  float* y) {
  // Kept between calls (no fresh pages per prefill). A reference, so the workers below read
  // this thread's copy, not their own thread_local one.
  thread_local QuantizedActivations kept;
  QuantizedActivations& xq = kept;
  const bool quantized = pw.format != PackedWeights::Format::kFloat;  // Q8 or Q4 panels
  if (quantized) QuantizeActivations(x, num_tokens, pw.cols, false, &xq, true);
  const PackedRowsFn fn = PackedFn(level, pw);
  const int64_t pr = pw.panel_rows;
  const int64_t full = pw.rows / pr;  // panels without padding rows
  const int64_t work = pr * pw.cols * num_tokens;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(work, 1));
  ParallelFor(pw.num_panels, grain, [&](int64_t p0, int64_t p1) {
    const int64_t e = std::min(p1, full);
    if (p0 < e) fn(pw, x, quantized ? &xq : nullptr, num_tokens, p0, e, y + p0 * pr, pw.rows);
    if (p1 > full) {  // the last panel, padded: through a scratch tile
      std::vector<float> tmp(num_tokens * pr);
      fn(pw, x, quantized ? &xq : nullptr, num_tokens, full, full + 1, tmp.data(), pr);
      const int64_t valid = pw.rows - full * pr;
      for (int64_t t = 0; t < num_tokens; ++t) {
        std::copy_n(&tmp[t * pr], valid, y + t * pw.rows + full * pr);
      }
    }
  });
}

}  // namespace

float* ThreadScratch(int slot, int64_t n) {
  struct Buffers {
    float* data[4] = {};
    int64_t size[4] = {};
    ~Buffers() {
      for (float* p : data) std::free(p);
    }
  };
  thread_local Buffers b;
  PAGODA_CHECK(slot >= 0 && slot < 4) << "ThreadScratch slot " << slot;
  if (n > b.size[slot]) {
    std::free(b.data[slot]);
    b.size[slot] = std::max<int64_t>(n, b.size[slot] * 3 / 2);
    // 64 bytes of slack past the end, as vector tails may read a partial line beyond n.
    b.data[slot] = static_cast<float*>(std::aligned_alloc(64, (b.size[slot] * 4 + 63) / 64 * 64 + 64));
  }
  return b.data[slot];
}

void MatMulAt(IsaLevel level, const WeightMatrix& w, const float* x, int64_t num_tokens,
              float* y) {
  CheckSupported(w);
  PAGODA_CHECK(IsaLevelSupported(level)) << "MatMul: ISA level " << IsaLevelName(level)
                                         << " is not supported by this CPU";
  if (num_tokens <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {
    std::fill(y, y + num_tokens * w.rows, 0.0f);
    return;
  }
  if (PackedUsable(w)) {
    MatMulPacked(level, *w.packed, x, num_tokens, y);
    return;
  }
  QuantizedActivations xq;
  const bool quantized = w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0;
  if (quantized) QuantizeActivations(x, num_tokens, w.cols, w.dtype == DType::kQ4_0, &xq);
  // K-quants: no fast path yet; rows are dequantized to f32 (exactly) and reduced by the
  // portable kernel at every level.
  const bool k_quant = DTypeBlockSize(w.dtype) == 256;
  const MatMulRowsFn rows_fn = k_quant ? &MatMulRowsGeneric : RowsFn(level);
  const QuantizedActivations* xq_ptr = quantized ? &xq : nullptr;
  // Enough rows per thread that a split pays for waking the workers; the split
  // never changes results (each output is computed whole by one thread).
  const int64_t work_per_row = w.cols * num_tokens;
  const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(work_per_row, 1));
  ParallelFor(w.rows, grain, [&](int64_t r0, int64_t r1) {
    rows_fn(w, x, xq_ptr, num_tokens, r0, r1, y);
  });
}

}  // namespace matmul_internal

void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  const ScopedOpTimer timer(OpKind::kMatMul, 2.0 * static_cast<double>(w.rows) * w.cols * num_tokens);
  matmul_internal::MatMulAt(matmul_internal::DefaultIsaLevel(), w, x, num_tokens, y);
}

std::string_view MatMulIsaName() {
  return matmul_internal::IsaLevelName(matmul_internal::DefaultIsaLevel());
}

}  // namespace pagoda
