// A kernel's dynamic shared-memory limit above the default 48 KB, set once per device (the
// attribute is per device: tensor parallelism launches the same kernel on several GPUs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {

// `devices_done`: a static of the caller's, one bit per device already set. max_carveout: also
// prefer the largest shared-memory carveout (a kernel whose blocks fill an SM's 228 KB together).
template <typename Kernel>
void AllowSmem(Kernel kernel, int bytes, uint32_t* devices_done, bool max_carveout = false) {
  int device = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&device));
  const uint32_t bit = device < 32 ? 1u << device : 0u;
  if (bit != 0 && (*devices_done & bit) != 0) return;
  if (max_carveout) {
    PAGODA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  }
  PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  *devices_done |= bit;
}

}  // namespace pagoda::cuda
