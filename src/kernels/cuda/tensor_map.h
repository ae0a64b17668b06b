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

}  // namespace pagoda::cuda
