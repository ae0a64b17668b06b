// RMSNorm on the device (params: kernels/params/norm_params.h): one thread block per row.
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/norm_params.h"

namespace pagoda::cuda {

void RmsNorm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
