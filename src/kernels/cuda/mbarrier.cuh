// Shared-memory barriers with transaction counts (mbarrier, sm_90), as the warp-specialized
// kernels use them: a producer's copies complete on a stage's `full` barrier (arrivals, and for
// bulk copies their bytes), consumers release the stage on its `empty` one.
#pragma once

#include <cstdint>

namespace pagoda::cuda {

__device__ __forceinline__ void MbarrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarrierArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives and adds `bytes` to the transactions the current phase waits for (bulk copies
// complete them as their bytes land).
__device__ __forceinline__ void MbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Arrives on `bar` once this thread's earlier cp.async copies have landed (counted in the
// barrier's arrivals).
__device__ __forceinline__ void CpAsyncArriveOn(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace pagoda::cuda
