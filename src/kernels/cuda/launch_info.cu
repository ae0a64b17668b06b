#include "kernels/cuda/launch_info.h"

#include <cuda_runtime.h>

#include <atomic>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {

int SmCount() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> counts[kMaxDevices] = {};  // 0: not queried yet
  int device = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) {
    int sms = 0;
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }
  int sms = counts[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

}  // namespace pagoda::cuda
