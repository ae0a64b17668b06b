// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute (the decode GEMMs, kernels/cuda/gemm.h) may start while the kernel
// ahead of it in the stream is still running, and waits for it only where it reads that
// kernel's output. Both instructions are no-ops where no such launch is involved.
#pragma once

namespace pagoda::cuda {

// Waits until the kernel ahead has finished and its writes are visible.
__device__ __forceinline__ void GridDependencyWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Lets a programmatic dependent start once every block of this kernel has said so (or ended):
// called at a block's start by the short kernels that precede a decode GEMM, so the GEMM's
// blocks take free SMs and request their weights while this kernel's last wave runs.
__device__ __forceinline__ void LaunchDependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

}  // namespace pagoda::cuda
