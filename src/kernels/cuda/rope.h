// RoPE in place on the device (params: kernels/params/rope_apply_params.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/rope_apply_params.h"

namespace pagoda::cuda {

void ApplyRope(const RopeApplyParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
