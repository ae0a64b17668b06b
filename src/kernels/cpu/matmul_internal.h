// Internals of the CPU MatMul shared by its per-ISA kernel files and its tests.
//
// Design (see matmul.h for the contract):
//
//   MatMul ──► level = forced level, else PAGODA_MATMUL_ISA, else the best the CPU has
//          ──► quantized weights: x quantized once per token (QuantizeActivations)
//          ──► packed weights: activations packed once into token tiles (shared), then
//              ParallelForDynamic over (panel block, token range) items ──► PackedRows<level>
//          ──► row-major weights: ParallelFor over output rows ──► MatMulRows<level>
//
// Every level computes each output y[t, r] with ONE fixed sequence of operations over
// k that does not depend on which other rows or tokens share its register tile:
//   F32/F16/BF16 weights: one vector accumulator of V lanes (V = 1x8 generic, 8 AVX2,
//     16 AVX-512) walks k in steps of V with FMA (the weight converted to f32 on the
//     fly, exactly); a zero-padded partial step covers cols % V; the lanes are then
//     summed in a fixed tree. (AVX-512 BF16: per chunk of 32, even elements then odd
//     ones, against x repacked to match; see matmul_avx512.cc.)
//   Q8_0/Q4_0 weights: per 32-block an exact integer dot product of the weight codes
//     with the int8 activation codes, converted to f32 and accumulated as
//     acc += float(sumi) * (d_w * d_x) into lane-wise accumulators, lanes summed in a
//     fixed tree at the end.
// Tiles of R rows x T tokens only interleave independent accumulators, so GEMV
// (num_tokens = 1) and GEMM give bit-identical rows, for any thread split. Different
// levels may differ in the last bits (different lane counts).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/params/matmul_params.h"

namespace pagoda::matmul_internal {

enum class IsaLevel : int {
  kGeneric = 0,  // portable C++, any x86-64 (or other) CPU
  kAvx2 = 1,     // AVX2 + FMA + F16C (Haswell, Zen 1+)
  kAvx512 = 2,   // AVX-512 F/BW/DQ/VL + VNNI (Ice Lake, Sapphire Rapids, Zen 4+)
};

std::string_view IsaLevelName(IsaLevel level);
bool IsaLevelSupported(IsaLevel level);
// The widest level this CPU supports.
IsaLevel BestIsaLevel();
// The level MatMul uses: PAGODA_MATMUL_ISA=generic|avx2|avx512 if set (and supported,
// else the best below it), else BestIsaLevel(). Read once.
IsaLevel DefaultIsaLevel();

// MatMul forced to one level, with an optional fused epilogue (matmul.h).
// REQUIRES: IsaLevelSupported(level).
void MatMulAt(IsaLevel level, const CpuWeight& w, const float* x, int64_t num_tokens,
              float* y, const MatMulEpilogue* ep = nullptr);

// Activations quantized per block of 32 for the integer dot products (as llama.cpp's
// q8_0 activations, but with an f32 scale): x[t, 32b + i] ~= d[t, b] * q[t, 32b + i],
// d = max|x| / 127, q = round-half-away(x / d) in [-127, 127].
struct QuantizedActivations {
  int64_t num_tokens = 0;
  int64_t cols = 0;
  int64_t num_blocks = 0;       // cols / 32
  std::vector<int8_t> q;        // [num_tokens, cols]
  std::vector<float> d;         // [num_tokens, num_blocks]
  // Only filled for Q4_0 weights: [num_tokens, num_blocks, 8], lane j = 8 * sum of
  // q[4j .. 4j+3] of the block: subtracting it turns sum(nibble * q) into
  // sum((nibble - 8) * q), lane by lane as vpmaddubsw+vpmaddwd / vpdpbusd produce them.
  std::vector<int32_t> offset_sums;
  // Only filled for packed Q8_0 weights: [num_tokens, num_blocks], -128 * sum of the
  // block's q: the packed codes are q + 128, so sum((q_w + 128) * q_x) plus this is
  // the block's exact dot product.
  std::vector<int32_t> bias128;

  const int8_t* q_row(int64_t t) const { return q.data() + t * cols; }
  const float* d_row(int64_t t) const { return d.data() + t * num_blocks; }
  const int32_t* offset_row(int64_t t) const {
    return offset_sums.data() + t * num_blocks * 8;
  }
  const int32_t* bias128_row(int64_t t) const { return bias128.data() + t * num_blocks; }
};

// Quantizes x [num_tokens, cols] (cols % 32 == 0), in parallel over tokens. Each row's
// result depends on that row only.
// (quantize_activations.cc; every level gives the same codes and scales.)
void QuantizeActivations(const float* x, int64_t num_tokens, int64_t cols, bool with_offset_sums,
                         QuantizedActivations* out, bool with_bias128 = false);
// The same at a given level. REQUIRES: IsaLevelSupported(level).
void QuantizeActivationsAt(IsaLevel level, const float* x, int64_t num_tokens, int64_t cols,
                           bool with_offset_sums, QuantizedActivations* out, bool with_bias128);

// One level's kernel: y[t, r] for r in [r0, r1) and every token. x is the f32 input
// [num_tokens, w.cols]; xq is its quantized form, not null iff w.dtype is Q8_0/Q4_0.
// y: [num_tokens, w.rows].
using MatMulRowsFn = void (*)(const WeightMatrix& w, const float* x,
                              const QuantizedActivations* xq, int64_t num_tokens, int64_t r0,
                              int64_t r1, float* y);
void MatMulRowsGeneric(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                       int64_t num_tokens, int64_t r0, int64_t r1, float* y);
void MatMulRowsAvx2(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                    int64_t num_tokens, int64_t r0, int64_t r1, float* y);
void MatMulRowsAvx512(const WeightMatrix& w, const float* x, const QuantizedActivations* xq,
                      int64_t num_tokens, int64_t r0, int64_t r1, float* y);

struct QuantizedTokenTiles;

// Packed kernels (packed_weights.h). The inputs of one packed MatMul, shared by its work
// items: the f32 activations, their quantized form (Q8/Q4 panels), and for the float GEMM of
// the AVX2 / AVX-512 levels the same activations in token tiles (PackTokenTiles).
struct PackedInputs {
  const float* x = nullptr;                  // f32 [num_tokens, cols]
  const QuantizedActivations* xq = nullptr;  // not null iff the format is kQ8/kQ4 (with bias128)
  const float* x_tiles = nullptr;            // token tiles, or null when the level packs none
  int64_t tile_tokens = 0;                   // tokens per tile of x_tiles / q_tiles
  // Quantized GEMM at AVX-512: xq in token tiles (PackQuantizedTokenTiles), or null.
  const QuantizedTokenTiles* q_tiles = nullptr;
};

// Quantized activations in token tiles of T tokens for the integer GEMM tiles: for tile i (tokens
// [i * T, i * T + tt)) and block b, the 4 codes of quad u of token j as one int32 at
// x4[i * nb * 8 * T + (b * 8 + u) * tt + j], the block's -128 * sum(codes) at
// bias[i * nb * T + b * tt + j] and its scale at d[same]: a tile broadcasts them from one
// pointer with constant offsets. Q4 panels: bias holds -8 * sum(codes).
struct QuantizedTokenTiles {
  std::vector<int32_t> x4, bias;
  std::vector<float> d;
};
void PackQuantizedTokenTiles(const QuantizedActivations& xq, int64_t tokens_per_tile, bool q4,
                             QuantizedTokenTiles* out);

// Token tiles: tile i holds tokens [i * T, i * T + tt) (tt = T but for the last tile) k-major,
// out[i * cols * T + k * tt + j] = x[(i * T + j) * cols + k], so a register tile broadcasts its
// tokens' activations from one pointer with constant offsets. Parallel over tiles.
void PackTokenTiles(const float* x, int64_t num_tokens, int64_t cols, int64_t tokens_per_tile, float* out);

// One work item: the outputs of panels [p0, p1) for tokens [t0, t1), written at
// y[(t - t0) * ldy + (p - p0) * panel_rows + i] for row p * panel_rows + i (padding rows of the
// last panel included: the caller gives room for them). t0 is a multiple of in.tile_tokens when
// x_tiles is used. Each output is one accumulator over k in increasing order (k-slices chained
// through y exactly), so any token or panel split gives the same bits.
using PackedRowsFn = void (*)(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1,
                              int64_t p0, int64_t p1, float* y, int64_t ldy);
void PackedRowsGeneric(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                       int64_t p1, float* y, int64_t ldy);
void PackedRowsAvx2(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                    int64_t p1, float* y, int64_t ldy);
void PackedRowsAvx512(const PackedWeights& pw, const PackedInputs& in, int64_t t0, int64_t t1, int64_t p0,
                      int64_t p1, float* y, int64_t ldy);
// Tokens of the level's GEMM register tile for these panels (the tile of x_tiles for float
// panels; quantized panels read their codes in place); 0: no fixed tile.
int64_t PackedTileTokensAvx2(const PackedWeights& pw);
int64_t PackedTileTokensAvx512(const PackedWeights& pw);

// Row block sizes: rows of one block are reused across all token tiles while they sit
// in L2, so W is read from memory once per block of tokens.
inline int64_t RowsPerL2Block(int64_t row_bytes, int64_t multiple) {
  constexpr int64_t kL2Budget = 192 * 1024;
  int64_t n = kL2Budget / (row_bytes > 0 ? row_bytes : 1);
  n = n / multiple * multiple;
  return n < multiple ? multiple : n;
}

// The GEMM walk the packed kernels share: k in slices of `slice` (values or 32-blocks) over
// [0, k_end), panels [p0, p1) in row blocks of `block` that stay in L2 across the token tiles,
// tokens [t0, t1) in tiles of `tile`. fn(k0, k1, t, tt, rb, re) runs tokens [t, t + tt) over
// panels [rb, re) for one slice. Slices go in increasing k, so tiles that chain them through y
// keep every output's order of operations.
template <typename Fn>
inline void ForEachGemmTile(int64_t k_end, int64_t slice, int64_t p0, int64_t p1, int64_t block, int64_t t0,
                            int64_t t1, int64_t tile, Fn&& fn) {
  for (int64_t k0 = 0; k0 < k_end; k0 += slice) {
    const int64_t k1 = k0 + slice < k_end ? k0 + slice : k_end;
    for (int64_t rb = p0; rb < p1; rb += block) {
      const int64_t re = rb + block < p1 ? rb + block : p1;
      for (int64_t t = t0; t < t1; t += tile) fn(k0, k1, t, t1 - t < tile ? t1 - t : tile, rb, re);
    }
  }
}

// One pass of a register tile over the k range [k0, k1) (k0, and k1 unless k1 == cols, are
// multiples of the vector width). Passes are chained in increasing k: the first (k0 == 0)
// starts from zero, the last (k1 == cols) adds the partial vector and writes y, the
// others store their accumulators (V lanes per output) in `state`, at the slot of
// output (r, t): a [rows][t_stride] grid starting at (r_base, t_base). Storing and
// reloading a vector is exact, so a chain of passes computes what one pass does.
struct KSlice {
  int64_t k0 = 0;
  int64_t k1 = 0;
  float* state = nullptr;  // null iff the pass covers all of k
  int64_t r_base = 0;
  int64_t t_base = 0;
  int64_t t_stride = 0;

  float* Slot(int64_t r, int64_t t, int lanes) const {
    return state + ((r - r_base) * t_stride + (t - t_base)) * lanes;
  }
};

// A 64-byte aligned buffer of at least n floats that belongs to the calling thread and is
// kept (grown when needed) between calls, so a GEMM does not allocate and page in its
// packing buffers on every call. Slots 0..3 are independent buffers; contents unspecified.
float* ThreadScratch(int slot, int64_t n);

}  // namespace pagoda::matmul_internal
