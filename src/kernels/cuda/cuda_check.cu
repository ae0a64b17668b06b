#include "kernels/cuda/cuda_check.h"

#include <sstream>

namespace pagoda::cuda {

void ThrowCudaError(cudaError_t e, const char* what, const char* file, int line) {
  std::ostringstream s;
  s << "CUDA error " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ") in " << what << " at " << file
    << ":" << line;
  ThrowError(ErrorCode::kInternal, s.str());
}

}  // namespace pagoda::cuda
