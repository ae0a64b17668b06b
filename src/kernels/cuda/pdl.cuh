// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute (the decode GEMMs, kernels/cuda/gemm.h) may start while the kernel
// ahead of it in the stream is still running, and waits for it only where it reads that
// kernel's output. The kernel ahead lets it in when all its blocks have ended (no
// griddepcontrol.launch_dependents yet: not measured). A no-op without such a launch.
#pragma once

namespace pagoda::cuda {

// Waits until the kernel ahead has finished and its writes are visible.
__device__ __forceinline__ void GridDependencyWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

}  // namespace pagoda::cuda
