// Greedy sampling on the device: the index of each row's largest value, so that only token ids
// (not the [rows, vocab] logits) come back to the host. The same choice as the CPU sampler's
// ArgMax (kernels/cpu/sampler.h): the lowest index among equal maxima, NaN never chosen, and
// index 0 when the row starts with NaN (nothing compares greater than it there either).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda::cuda {

// out[r] = argmax of logits[r * row_stride, r * row_stride + cols) for r < rows (device memory).
void ArgMaxRows(const float* logits, int64_t row_stride, int64_t rows, int64_t cols, int32_t* out,
                cudaStream_t stream);

}  // namespace pagoda::cuda
