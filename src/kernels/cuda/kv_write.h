// K/V rows of the step into their paged-cache slots (params: kernels/params/kv_write_params.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/params/kv_write_params.h"

namespace pagoda::cuda {

void WriteKV(const KVWriteParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
