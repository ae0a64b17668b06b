// Error checks for CUDA runtime calls: every call is checked, and every kernel
// launch is followed by PAGODA_CUDA_CHECK_LAUNCH (cudaGetLastError). A failure throws
// pagoda::Error (kInternal) naming the call, the file and line and the CUDA error string;
// library code never exits.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace pagoda::cuda {

[[noreturn]] void ThrowCudaError(cudaError_t e, const char* what, const char* file, int line);

inline void Check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) ThrowCudaError(e, what, file, line);
}

}  // namespace pagoda::cuda

#define PAGODA_CUDA_CHECK(expr) ::pagoda::cuda::Check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: a bad configuration or an earlier asynchronous fault.
#define PAGODA_CUDA_CHECK_LAUNCH(kernel) \
  ::pagoda::cuda::Check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
