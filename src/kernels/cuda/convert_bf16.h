// Rows of f32 rounded to bf16 on the device: the input of the bf16 GEMMs (kernels/cuda/gemm.h)
// where the kernel that made it did not also write it in bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

// x [rows, cols] f32 -> out [rows, cols_padded] bf16 bits (round to nearest even), zeros past cols.
// pdl: launched as a programmatic dependent that lets the next kernel in at once (for a
// conversion of one wave followed by a pdl GEMM).
void ConvertToBf16(const float* x, int64_t x_stride, int64_t rows, int64_t cols, int64_t cols_padded, uint16_t* out,
                   cudaStream_t stream, bool pdl = false);

}  // namespace pagoda::cuda
