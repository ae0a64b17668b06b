// Hopper's bulk copies (TMA): a 2-D box of a tensor map (kernels/cuda/tensor_map.h), or a run of
// contiguous bytes, into shared memory, completing its bytes on an mbarrier
// (kernels/cuda/mbarrier.cuh). One thread issues a copy.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace pagoda::cuda {

// The box at (column c0, row c1) of `map` (a __grid_constant__ kernel parameter) into this
// block's shared memory at `dst`.
__device__ __forceinline__ void TmaLoad2D(uint32_t dst, const CUtensorMap& map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// `bytes` contiguous bytes at `src` (16-byte aligned, a multiple of 16) into this block's shared
// memory at `dst` (16-byte aligned), completing on the mbarrier `bar`: a bulk copy with no
// tensor map.
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

}  // namespace pagoda::cuda
