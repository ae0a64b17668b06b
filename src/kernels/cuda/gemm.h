// y = x W^T on the GPU, the same bits for a row whatever the number of rows (batch invariance).
//
//   x [m, k] f32 (row stride x_stride), W [n, k] row-major, y [m, n] f32 (row stride y_stride);
//   accumulate = true adds the product to y (the kAddTo epilogue).
//
// Two weight types:
//   - bf16 W (every bf16/f16/quantized model): tensor cores with bf16 operands and f32
//     accumulation. x is rounded to bf16 first (GemmBf16's scratch `xb`, zero-padded to the
//     weight's padded k). W is stored with k padded to a multiple of 64 (zeros). Up to 8 rows:
//     one launch of an mma.sync m16n8k16 kernel (the weight streamed through every SM) that
//     rounds x to bf16 as it builds its fragments: for a weight cut into k chunks, one block per
//     16 columns with one warp per chunk, the chunk sums added in the block (gemm_gemv.cuh);
//     uncut, 16 x 64 tiles. Up to 64 rows: x rounded once (ConvertToBf16), then wgmma
//     m64n128k16 or m64n64k16 tiles (or 64 x 64 mma.sync tiles), whichever fills the SMs' waves
//     best, the widest first; each tile's last block to finish adds the k chunks' sums. More
//     rows: CUTLASS's sm90 kernels (TMA, warp-specialized wgmma; gemm_cutlass.h), one
//     product per k chunk adding the previous chunks' sum in its epilogue; where the operands
//     are not 16-byte aligned for TMA, our wgmma m64n256k16 kernel with 128 x 256 tiles, then
//     ReduceChunks.
//     Launched as programmatic dependents (GemmBf16Params::pdl), the m <= 64 kernels start as
//     the kernel ahead of them ends and request their first weight tiles before its writes
//     are visible (they need only x to wait for).
//   - f32 W (f32 models): CUDA cores, f32 products and sums in k order (no TF32).
//
// Why the bits do not depend on m: every output element is summed in one fixed order that only
// (n, k) decide. The k axis is cut into `splits` chunks of `chunk` values (chosen per weight
// from n and k alone, GemmSplitsFor); inside a chunk the products are added k-tile by k-tile
// (64 wide, four k-steps of 16 in order) into a zero-started accumulator; the chunk sums are
// then added in chunk order (total = c0 + c1 + c2 ..., by each tile's last block, ReduceChunks
// or CUTLASS's epilogues), and last to y when accumulating. One block per (tile, chunk) writes the chunk's partial sums (rows in slabs of
// kGemmPartialMaxRows). mma.sync and wgmma give the same sums for the same k-steps (tested), and
// the tile sizes chosen by m only decide which block computes an output, so every kernel agrees
// bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

inline constexpr int64_t kGemmKTile = 64;
// Rows of one pass of a product of several chunks (the partial planes' height).
inline constexpr int64_t kGemmPartialMaxRows = 512;
// Tile counters a caller provides (zeroed once; the kernels leave them zero): one per 64 output
// columns of a weight cut into several k chunks (such weights have fewer than 256 tiles).
inline constexpr int64_t kGemmMaxCounters = 1024;
// Room past the partial planes for the split-K kernels' tile locks (products of more than 64 rows).
inline constexpr int64_t kGemmSplitKLockFloats = 64 * 1024;

// The k chunks for a weight [n, k]: more chunks for few output tiles (decode streams the
// weight through every SM), one for wide weights. A function of (n, k) only.
struct GemmSplits {
  int32_t splits = 1;
  int64_t chunk = 0;  // values per chunk, a multiple of kGemmKTile; the last chunk may be shorter
};
GemmSplits GemmSplitsFor(int64_t n, int64_t k_padded);

// k rounded up to the k-tile: the row length of a stored bf16 weight.
inline int64_t GemmPaddedK(int64_t k) { return (k + kGemmKTile - 1) / kGemmKTile * kGemmKTile; }

struct GemmBf16Params {
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t m = 0, n = 0, k = 0;
  const uint16_t* w = nullptr;  // bf16 bits [n, k_padded]
  int64_t k_padded = 0;
  GemmSplits splits;
  float* y = nullptr;
  int64_t y_stride = 0;
  bool accumulate = false;
  // Scratch the caller owns (device): xb [m, k_padded] bf16 (m > 64); partial [splits, min(m,
  // kGemmPartialMaxRows), n] f32 when splits > 1, plus kGemmSplitKLockFloats for m > 64
  // (GemmBf16PartialFloats says how many floats);
  // counters: kGemmMaxCounters ints, zero before the first call (each call leaves them zero).
  uint16_t* xb = nullptr;
  float* partial = nullptr;
  int* counters = nullptr;
  // Up to 64 rows: launch as a programmatic dependent of the kernel ahead in the stream, so the
  // weight stream starts while that kernel drains (CUDA graphs keep the dependency).
  bool pdl = false;
  // SwiGLU: y's columns are gate and up alternating 16 at a time (StackOrder::kPairs16) and
  // silu_out [m, n / 2] receives silu(gate) * up. Where GemmFusesSilu, the product's epilogue
  // writes it and y is not touched; otherwise the product goes to y and the paired SiLU kernel
  // follows (the same bits either way).
  float* silu_out = nullptr;
  int64_t silu_stride = 0;
  // Where GemmFusesSilu: also silu(gate) * up rounded to bf16 here, [m, n / 2] contiguous (the
  // down product's xb, so that it skips its conversion); null: none.
  uint16_t* silu_bf16 = nullptr;
  // xb already holds x rounded to bf16 (k == k_padded): the kernel that made x wrote it
  // (RMSNorm's y_bf16, silu_bf16 above), so no conversion is launched. The same bits.
  bool xb_ready = false;
};
// Whether GemmBf16 rounds an x of m rows to bf16 into xb (more than 8 rows; up to 8 its kernels
// read x in f32): where a bf16 copy written by x's producer saves a launch.
bool GemmConvertsX(int64_t m);
int64_t GemmBf16PartialFloats(int64_t m, int64_t n, const GemmSplits& s);
// Up to kGemmFusedSiluMaxRows rows, one k chunk, n a multiple of 32, not accumulating: silu_out
// in the epilogue.
inline constexpr int64_t kGemmFusedSiluMaxRows = 64;
bool GemmFusesSilu(const GemmBf16Params& p);
void GemmBf16(const GemmBf16Params& p, cudaStream_t stream);

}  // namespace pagoda::cuda
