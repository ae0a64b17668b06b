// Hopper's bulk tensor copies (TMA): a 2-D box of a tensor map (kernels/cuda/tensor_map.h) into
// shared memory, completing its bytes on an mbarrier (kernels/cuda/mbarrier.cuh). One thread
// issues a copy.
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

}  // namespace pagoda::cuda
