// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute may start while the kernel ahead of it in the stream is still
// running, and waits for it only where it reads that kernel's output. The kernel ahead lets it
// in when all its blocks have called AllowDependentLaunch or ended. In a decode step:
//   - the GEMMs (kernels/cuda/gemm.h) are dependents of the row kernels ahead of them (RMSNorm,
//     the paired SiLU, the attention merge, the bf16 conversion), which let them in first
//     thing: the GEMM's blocks stream their first weight stages while those run;
//   - the row kernels after a GEMM (RMSNorm, the attention inputs, the paired SiLU) are
//     dependents of it, let in once each GEMM block has finished its products: their blocks
//     are resident and waiting when the GEMM's last stores land, instead of being launched
//     after it;
//   - FlashAttention is a dependent of the attention inputs kernel, which lets it in first
//     thing (it reads the step's positions and block tables meanwhile), and its merge kernel a
//     dependent of it.
// Every kernel so launched calls GridDependencyWait before it reads or writes memory that a
// kernel ahead of it touches, so a chain of dependents still runs in stream order. Both device
// calls are no-ops without such a launch.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {

// Lets the next kernel in the stream start now if it was launched as a programmatic dependent
// (it still waits for this whole kernel in GridDependencyWait before reading its output). For
// kernels of one wave: a dependent's blocks would otherwise take SM slots from later waves.
__device__ __forceinline__ void AllowDependentLaunch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Waits until the kernel ahead has finished and its writes are visible.
__device__ __forceinline__ void GridDependencyWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent when `pdl`.
template <class... Params, class... Args>
void LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                     Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  PAGODA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace pagoda::cuda
