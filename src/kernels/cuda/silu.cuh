// SiLU on the device, one definition for every kernel that applies it (the paired SiLU row
// kernel and the gate|up GEMM's fused epilogue), so that both give a value the same bits.
#pragma once

namespace pagoda::cuda {

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

}  // namespace pagoda::cuda
