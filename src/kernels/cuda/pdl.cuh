// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute (the decode GEMMs, kernels/cuda/gemm.h) may start while the kernel
// ahead of it in the stream is still running, and waits for it only where it reads that
// kernel's output. The kernel ahead lets it in when all its blocks have called
// AllowDependentLaunch or ended: the row kernels that precede decode GEMMs (RMSNorm, the paired
// SiLU, the attention merge) call it first thing, so the GEMM's blocks stream their first
// weight stages while they run. Both are no-ops without such a launch.
#pragma once

namespace pagoda::cuda {

// Lets the next kernel in the stream start now if it was launched as a programmatic dependent
// (it still waits for this whole kernel in GridDependencyWait before reading its output). For
// kernels of one wave: a dependent's blocks would otherwise take SM slots from later waves.
__device__ __forceinline__ void AllowDependentLaunch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Waits until the kernel ahead has finished and its writes are visible.
__device__ __forceinline__ void GridDependencyWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

}  // namespace pagoda::cuda
