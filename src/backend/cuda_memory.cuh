// Device memory for the CUDA backend: checked allocations, scratch buffers that only grow, and
// whether a pointer is device memory. Included by the backend's .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace pagoda {

inline std::shared_ptr<void> DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  PAGODA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  // A deleter must not throw; at process exit the runtime may already be gone.
  return std::shared_ptr<void>(p, [](void* q) { (void)cudaFree(q); });
}

// A device buffer that only grows (a warmed-up step allocates nothing from it). A replaced
// buffer stays allocated: a captured step graph may still read it (it was large enough for
// that graph's step).
struct DeviceScratch {
  std::shared_ptr<void> ptr;
  size_t bytes = 0;
  std::vector<std::shared_ptr<void>> retired;
  template <typename T>
  T* Get(int64_t n) {
    const size_t need = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    if (need > bytes) {
      if (ptr) retired.push_back(std::move(ptr));
      ptr = DeviceAlloc(need);
      bytes = need;
    }
    return static_cast<T*>(ptr.get());
  }
  template <typename T>
  T* Upload(const T* host, int64_t n) {
    T* d = Get<T>(n);
    if (n > 0) PAGODA_CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  }
  // Upload into a buffer that grows to the next power of two (the step's inputs: few
  // reallocations as contexts grow). Sets *moved when the data landed at a new address.
  template <typename T>
  T* UploadGrowing(const T* host, int64_t n, bool* moved) {
    const void* before = ptr.get();
    Reserve<T>(n);
    if (ptr.get() != before) *moved = true;
    return Upload(host, n);
  }
  // The capacity UploadGrowing would grow to for n values, now (start-up sizing).
  template <typename T>
  void Reserve(int64_t n) {
    int64_t capacity = 64;
    while (capacity < n) capacity *= 2;
    Get<T>(capacity);
  }
};

inline bool IsDevicePointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace pagoda
