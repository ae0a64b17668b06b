// RMSNorm on the device (params: kernels/params/norm_params.h): one thread block per row; rows of
// a multiple of 4 columns (up to 16384) are held in registers as float4s, read from memory once.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/norm_params.h"

namespace pagoda::cuda {

// pdl: launched as a programmatic dependent of the kernel ahead (kernels/cuda/pdl.cuh).
void RmsNorm(const RmsNormParams& p, cudaStream_t stream, bool pdl = false);

}  // namespace pagoda::cuda
