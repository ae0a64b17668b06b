// Tensor maps (TMA descriptors) for Hopper's bulk tensor copies: a 2-D bf16 matrix read in
// boxes of 128-byte rows, stored in shared memory in the 128-byte swizzle that the wgmma
// kernels' descriptors expect (kernels/cuda/wgmma.cuh's SwizzledTileDescriptor).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace pagoda::cuda {

// A row-major bf16 matrix of `rows` x `cols` (`row_stride` elements apart, a multiple of 8) at
// `base` (16-byte aligned), read in boxes of box_rows x 64 columns; reads past the matrix give
// zeros. Throws pagoda::Error when the driver refuses it.
CUtensorMap Bf16TensorMap(const void* base, int64_t rows, int64_t cols, int64_t row_stride, int box_rows);

// Rows of `row_bytes` bytes, `row_stride` bytes apart (a multiple of 16), at `base` (16-byte
// aligned), read in boxes of box_rows x box_bytes (a multiple of 16, at most 256) stored
// unswizzled, box_bytes apart in shared memory: FlashAttention's one-warp shapes copy a tile's
// quantized rows of one KV head (codes and scales) as whole paged blocks, each row at its padded
// pitch. A box's first column must be a 16-byte multiple (else the copy faults: an illegal
// instruction). Reads past a row's end or before row 0 give zeros. Throws pagoda::Error when the
// driver refuses it.
CUtensorMap PitchedRowsTensorMap(const void* base, int64_t rows, int64_t row_bytes, int64_t row_stride, int box_bytes,
                                 int box_rows);

}  // namespace pagoda::cuda
