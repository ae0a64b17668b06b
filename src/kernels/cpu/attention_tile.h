// The inner step every CPU attention kernel shares (paged MHA/GQA/MQA and MLA): one tile of
// up to kTileKeys keys for a group of query heads that read the same K/V rows, with the
// FlashAttention online-softmax update. Run-time dispatched: AVX-512, AVX2 and portable
// variants are compiled from one body (attention_tile.inc) with different target attributes.
//
// One step, for heads h in [0, heads) and keys j in [0, n):
//   1. the K rows are converted to f32 (bf16 / f16 / f32 rows) and transposed into a
//      [dk][kTileKeys] tile, each row read once for all heads;
//   2. s[h][j] = scale * sum_i q[h][i] k[j][i]: keys in vector lanes, q broadcast, one FMA
//      chain over i = 0, 1, ..., dk - 1 per score (no horizontal sums);
//   3. m' = max(m, max_j s), c = exp(m - m'), p = exp(s - m'), l = l c + sum_j p (the sum in
//      16 lanes, lane = j mod 16, the lanes added in a fixed tree), m = m';
//   4. acc = acc c + sum_j p_j v_j, one FMA per element and key, keys in order.
//
// Determinism: the arithmetic of one (head, key) pair is one fixed sequence that depends only
// on the ISA level, never on n beyond the keys themselves, the number of heads, the head's
// place in its group or the vector width: AVX2 (8 lanes) and AVX-512 (16 lanes) give the same
// bits; the portable level differs from them in rounding (it has no fused multiply-add).
// Thread safety: reentrant; the scratch belongs to the caller.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace pagoda::matmul_internal {
enum class IsaLevel : int;
}

namespace pagoda::cpu {

// Most keys in one step (the paged and MLA kernels' tiles).
inline constexpr int64_t kTileKeys = 64;
// The accumulator rows are padded to a multiple of this many floats (zeros in the padding).
inline constexpr int64_t kTileAccAlign = 16;

inline constexpr int64_t TileAccStride(int64_t dv) {
  return (dv + kTileAccAlign - 1) / kTileAccAlign * kTileAccAlign;
}

// One key's row: f32, bf16 or f16 elements (quantized rows are dequantized to f32 first).
struct TileRow {
  const void* data = nullptr;
  DType dtype = DType::kF32;
};

struct AttentionTileArgs {
  int64_t n = 0;            // keys, 1..kTileKeys
  int64_t heads = 0;        // query heads sharing the rows
  const float* q = nullptr;  // head h: q + h * q_stride, dk0 + dk1 values
  int64_t q_stride = 0;
  int64_t dk0 = 0;          // key values from k0 rows, then dk1 from k1 rows (dk1 may be 0)
  int64_t dk1 = 0;
  int64_t dv = 0;           // value width
  float scale = 1.0f;
  const TileRow* k0 = nullptr;  // [n]
  const TileRow* k1 = nullptr;  // [n], unused when dk1 == 0
  const TileRow* v = nullptr;   // [n]
  // Optional, [heads]: head h sees only keys [0, row_n[h]) of the n (its scores past them are
  // -inf, its p exactly 0). A head with fewer keys gets the bits it gets from a step of
  // row_n[h] keys alone (as long as the V rows it skips are finite: their products with p = 0
  // are added), and a head with 0 keys is left unchanged (needs m > -inf).
  const int32_t* row_n = nullptr;
  // Optional: cache lines to prefetch while the step computes (the next tile's K/V rows), issued
  // a few at a time between the multiply-adds so the memory requests overlap the arithmetic.
  const void* const* prefetch = nullptr;
  int64_t num_prefetch = 0;
};

// Per head h: running max m[h] (-inf before the first step), sum l[h] (0) and the
// unnormalized output acc[h * acc_stride, + dv) (zeros; acc_stride = TileAccStride(dv), the
// padding zeros too). After the last step the output is acc / l.
struct AttentionTileState {
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
  int64_t acc_stride = 0;
};

// Storage for the running state of `rows` query rows, reused from one walk over the keys to
// the next: Reset gives m = -inf, l = 0 and zero accumulators (padding included).
struct TileStateBuffers {
  std::vector<float> m, l, acc;
  AttentionTileState Reset(int64_t rows, int64_t dv) {
    const int64_t stride = TileAccStride(dv);
    m.assign(rows, -std::numeric_limits<float>::infinity());
    l.assign(rows, 0.0f);
    acc.assign(rows * stride, 0.0f);
    return {m.data(), l.data(), acc.data(), stride};
  }
};

// Scratch of one thread: 64-byte aligned floats, grown on demand, reused across steps.
class TileScratch {
 public:
  TileScratch() = default;
  ~TileScratch() { std::free(data_); }
  TileScratch(const TileScratch&) = delete;
  TileScratch& operator=(const TileScratch&) = delete;
  // At least n floats (contents unspecified).
  float* Get(int64_t n) {
    if (n > size_) {
      std::free(data_);
      size_ = (n + 15) / 16 * 16;
      data_ = static_cast<float*>(std::aligned_alloc(64, size_ * 4));
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// Floats of scratch one step needs: the transposed K tile, the scores, the corrections and
// (for V rows no wider than dk) the V rows widened to f32.
inline int64_t TileScratchFloats(int64_t heads, int64_t dk) {
  return (2 * dk + heads) * kTileKeys + 2 * heads + 64;
}

struct AttentionTileKernels {
  // One step; scratch holds at least TileScratchFloats(a.heads, a.dk0 + a.dk1) floats,
  // 64-byte aligned.
  void (*step)(const AttentionTileArgs& a, const AttentionTileState& st, float* scratch);
  // y[i] = exp(x[i]) as the step computes it (tests).
  void (*exp)(const float* x, float* y, int64_t n);
};

AttentionTileKernels AttentionTileGeneric();
AttentionTileKernels AttentionTileAvx2();
AttentionTileKernels AttentionTileAvx512();

// The kernels of one level. REQUIRES: matmul_internal::IsaLevelSupported(level).
AttentionTileKernels AttentionTileAt(matmul_internal::IsaLevel level);
// The level the MatMul uses (matmul_internal::DefaultIsaLevel(): PAGODA_MATMUL_ISA or the best).
matmul_internal::IsaLevel DefaultAttentionIsa();
// Every level this CPU supports, portable first (tests and benchmarks run each).
std::vector<matmul_internal::IsaLevel> SupportedAttentionIsas();

}  // namespace pagoda::cpu
