#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/norm.h"

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

bool PackedUsable(const CpuWeight& w) {
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
    if (packed_level == IsaLevel::kAvx512 && pw.panel_rows == 32) return &PackedRowsAvx512;
    if (packed_level == IsaLevel::kAvx2 && pw.panel_rows == (quantized ? 32 : 16)) return &PackedRowsAvx2;
  }
  return &PackedRowsGeneric;
}

int64_t PackedTileTokens(IsaLevel level, const PackedWeights& pw) {
  const PackedRowsFn fn = PackedFn(level, pw);
  if (fn == &PackedRowsAvx512) return PackedTileTokensAvx512(pw);
  if (fn == &PackedRowsAvx2) return PackedTileTokensAvx2(pw);
  return 0;
}

// The work items of a packed MatMul, balanced across the threads (ParallelForDynamic): the
// GEMV in chunks of an even number of panels (~64 KiB of weights or more), the GEMM in blocks of 256 rows by all tokens,
// or by token ranges (multiples of the token tile) when the rows alone give too few items to
// keep every thread busy to the end. The last panel, when padded, is one more item through a
// scratch tile. No split changes a result (matmul_internal.h).
// The epilogue on the block y[t - t0][r - r0] (row stride ldy) of tokens [t0, t1), rows [r0, r1)
// of a w.rows-row product (r0 a multiple of 32 for kSiluMulPairs).
void ApplyEpilogue(const MatMulEpilogue& ep, int64_t rows, const float* y, int64_t ldy, int64_t t0, int64_t t1,
                   int64_t r0, int64_t r1) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* yt = y + (t - t0) * ldy;
    if (ep.kind == MatMulEpilogue::Kind::kAddTo) {
      AddInPlaceRun(yt, r1 - r0, ep.out + t * rows + r0);
      continue;
    }
    // 16 gate rows, then their 16 up rows: gathered into two runs, then one SiluMulRun (whose
    // per-call cost would dominate 16 values at a time).
    constexpr int64_t kRun = 256;
    float gate[kRun], up[kRun];
    for (int64_t r = r0; r < r1;) {
      const int64_t end = std::min(r1, r + 2 * kRun);
      float* g = gate;
      float* u = up;
      for (int64_t p = r; p < end; p += 32, g += 16, u += 16) {
        std::copy_n(yt + (p - r0), 16, g);
        std::copy_n(yt + (p - r0) + 16, 16, u);
      }
      SiluMulRun(gate, up, (end - r) / 2, ep.out + t * (rows / 2) + r / 2);
      r = end;
    }
  }
}

void MatMulPacked(IsaLevel level, const PackedWeights& pw, const float* x, int64_t num_tokens,
                  float* y, const MatMulEpilogue* ep) {
  // Kept between calls (no fresh pages per prefill). References, so the workers below read
  // this thread's copies, not their own thread_local ones.
  thread_local QuantizedActivations kept;
  thread_local std::vector<float> kept_tiles;
  thread_local QuantizedTokenTiles kept_q_tiles;
  QuantizedActivations& xq = kept;
  const bool quantized = pw.format != PackedWeights::Format::kFloat;  // Q8 or Q4 panels
  if (quantized) QuantizeActivations(x, num_tokens, pw.cols, false, &xq, true);
  const PackedRowsFn fn = PackedFn(level, pw);
  PackedInputs in;
  in.x = x;
  in.xq = quantized ? &xq : nullptr;
  const int64_t tile = num_tokens > 1 ? PackedTileTokens(level, pw) : 0;
  if (tile > 0 && !quantized) {
    const int64_t num_tiles = (num_tokens + tile - 1) / tile;
    kept_tiles.resize(num_tiles * tile * pw.cols);
    PackTokenTiles(x, num_tokens, pw.cols, tile, kept_tiles.data());
    in.x_tiles = kept_tiles.data();
    in.tile_tokens = tile;
  } else if (tile > 0) {
    PackQuantizedTokenTiles(xq, tile, pw.format == PackedWeights::Format::kQ4, &kept_q_tiles);
    in.q_tiles = &kept_q_tiles;
    in.tile_tokens = tile;
  }
  const int64_t pr = pw.panel_rows;
  const int64_t full = pw.rows / pr;  // panels without padding rows
  int64_t panels_per_item = 0, token_ranges = 1, tokens_per_range = num_tokens;
  if (num_tokens == 1) {
    panels_per_item = std::max<int64_t>(2, (int64_t{64} << 10) / std::max<int64_t>(pw.panel_bytes, 1)) / 2 * 2;
  } else {
    panels_per_item = std::max<int64_t>(1, 256 / pr);
    const int64_t row_items = (full + panels_per_item - 1) / panels_per_item;
    const int64_t want = 4 * NumThreads();
    if (row_items > 0 && row_items < want) {
      const int64_t unit = tile > 0 ? tile : 8;
      const int64_t ranges = std::min((want + row_items - 1) / row_items, (num_tokens + unit - 1) / unit);
      tokens_per_range = ((num_tokens + ranges - 1) / ranges + unit - 1) / unit * unit;
      token_ranges = (num_tokens + tokens_per_range - 1) / tokens_per_range;
    }
  }
  const int64_t row_items = (full + panels_per_item - 1) / panels_per_item;
  const int64_t items = row_items * token_ranges + (pw.num_panels > full ? 1 : 0);
  // At least 2^18 multiply-adds per thread (a tiny model's projections run on one thread:
  // waking another costs more than it saves).
  const double macs = static_cast<double>(pw.num_panels) * pr * pw.cols * num_tokens;
  const int threads = static_cast<int>(std::clamp<double>(macs / (1 << 18), 1, NumThreads()));
  ParallelForDynamic(items, [&](int64_t i) {
    if (i == row_items * token_ranges) {  // the last panel, padded: through a scratch tile
      std::vector<float> tmp(num_tokens * pr);
      fn(pw, in, 0, num_tokens, full, full + 1, tmp.data(), pr);
      const int64_t valid = pw.rows - full * pr;
      if (ep != nullptr) {
        ApplyEpilogue(*ep, pw.rows, tmp.data(), pr, 0, num_tokens, full * pr, pw.rows);
        return;
      }
      for (int64_t t = 0; t < num_tokens; ++t) {
        std::copy_n(&tmp[t * pr], valid, y + t * pw.rows + full * pr);
      }
      return;
    }
    const int64_t r = i / token_ranges, c = i % token_ranges;
    const int64_t p0 = r * panels_per_item, p1 = std::min(full, p0 + panels_per_item);
    const int64_t t0 = c * tokens_per_range, t1 = std::min(num_tokens, t0 + tokens_per_range);
    if (ep == nullptr) {
      fn(pw, in, t0, t1, p0, p1, y + t0 * pw.rows + p0 * pr, pw.rows);
      return;
    }
    // Fused: the item's block goes to a scratch of this thread (it stays in L2), then to the
    // epilogue.
    const int64_t block_rows = (p1 - p0) * pr;
    float* block = ThreadScratch(3, (t1 - t0) * block_rows);
    fn(pw, in, t0, t1, p0, p1, block, block_rows);
    ApplyEpilogue(*ep, pw.rows, block, block_rows, t0, t1, p0 * pr, p1 * pr);
  }, threads);
}

}  // namespace

void PackQuantizedTokenTiles(const QuantizedActivations& xq, int64_t tokens_per_tile, bool q4,
                             QuantizedTokenTiles* out) {
  const int64_t num_tokens = xq.num_tokens, nb = xq.num_blocks, T = tokens_per_tile;
  const int64_t num_tiles = (num_tokens + T - 1) / T;
  out->x4.resize(num_tiles * nb * 8 * T);
  out->bias.resize(num_tiles * nb * T);
  out->d.resize(num_tiles * nb * T);
  ParallelFor(num_tiles, std::max<int64_t>(1, 256 / std::max<int64_t>(nb, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i * T, tt = std::min(T, num_tokens - t);
      int32_t* x4 = out->x4.data() + i * nb * 8 * T;
      int32_t* bias = out->bias.data() + i * nb * T;
      float* d = out->d.data() + i * nb * T;
      for (int64_t j = 0; j < tt; ++j) {
        const int8_t* q = xq.q_row(t + j);
        const int32_t* b128 = xq.bias128_row(t + j);
        const float* dx = xq.d_row(t + j);
        for (int64_t b = 0; b < nb; ++b) {
          for (int64_t u = 0; u < 8; ++u) std::memcpy(&x4[(b * 8 + u) * tt + j], q + b * 32 + u * 4, 4);
          bias[b * tt + j] = q4 ? b128[b] / 16 : b128[b];
          d[b * tt + j] = dx[b];
        }
      }
    }
  });
}

void PackTokenTiles(const float* x, int64_t num_tokens, int64_t cols, int64_t tokens_per_tile, float* out) {
  const int64_t num_tiles = (num_tokens + tokens_per_tile - 1) / tokens_per_tile;
  ParallelFor(num_tiles, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i * tokens_per_tile, tt = std::min(tokens_per_tile, num_tokens - t);
      float* dst = out + i * cols * tokens_per_tile;
      for (int64_t j = 0; j < tt; ++j) {
        const float* src = x + (t + j) * cols;
        for (int64_t k = 0; k < cols; ++k) dst[k * tt + j] = src[k];
      }
    }
  });
}

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

void MatMulAt(IsaLevel level, const CpuWeight& w, const float* x, int64_t num_tokens,
              float* y, const MatMulEpilogue* ep) {
  CheckSupported(w);
  PAGODA_CHECK(IsaLevelSupported(level)) << "MatMul: ISA level " << IsaLevelName(level)
                                         << " is not supported by this CPU";
  if (ep != nullptr && ep->kind == MatMulEpilogue::Kind::kSiluMulPairs) {
    PAGODA_CHECK(PackedUsable(w) && w.packed->pairs16 && w.rows % 32 == 0)
        << "MatMul: kSiluMulPairs needs the packed gate|up panels of StackOrder::kPairs16";
  }
  if (num_tokens <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {
    std::fill(y, y + num_tokens * w.rows, 0.0f);
    if (ep != nullptr) ApplyEpilogue(*ep, w.rows, y, w.rows, 0, num_tokens, 0, w.rows);
    return;
  }
  if (PackedUsable(w)) {
    MatMulPacked(level, *w.packed, x, num_tokens, y, ep);
    return;
  }
  thread_local QuantizedActivations xq;  // kept per thread: its vectors keep their capacity
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
  if (ep != nullptr) {
    ParallelFor(num_tokens, std::max<int64_t>(1, 16384 / w.rows), [&](int64_t t0, int64_t t1) {
      ApplyEpilogue(*ep, w.rows, y + t0 * w.rows, w.rows, t0, t1, 0, w.rows);
    });
  }
}

}  // namespace matmul_internal

void MatMul(const CpuWeight& w, const float* x, int64_t num_tokens, float* y) {
  const ScopedOpTimer timer(OpKind::kMatMul, 2.0 * static_cast<double>(w.rows) * w.cols * num_tokens);
  matmul_internal::MatMulAt(matmul_internal::DefaultIsaLevel(), w, x, num_tokens, y);
}

void MatMul(const CpuWeight& w, const float* x, int64_t num_tokens, float* y, const MatMulEpilogue& ep) {
  const ScopedOpTimer timer(OpKind::kMatMul, 2.0 * static_cast<double>(w.rows) * w.cols * num_tokens);
  matmul_internal::MatMulAt(matmul_internal::DefaultIsaLevel(), w, x, num_tokens, y, &ep);
}

std::string_view MatMulIsaName() {
  return matmul_internal::IsaLevelName(matmul_internal::DefaultIsaLevel());
}

}  // namespace pagoda
