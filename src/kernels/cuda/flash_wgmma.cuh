// FlashAttention's wide (prefill) shape on Hopper warpgroup products, FlashAttention-3's
// structure. Included by flash_wgmma.cu (its kernel and launch).
//
// A block serves the same 64 query rows as the mma.sync wide kernel (four warps of 16 rows, a
// FlashWorkItem) with two warpgroups:
//   - warpgroup 1, the producer, lowers its registers (setmaxnreg) and copies K of tile n, then
//     V of tile n - 1, from their paged blocks by cp.async into two rings of kStages stages, each
//     thread's copies completing on the stage's `full` mbarrier once the consumers have arrived
//     on its `empty` one (K runs a tile ahead: the consumers score tile n + 1 while they
//     multiply tile n's P by its V);
//   - warpgroup 0, the consumers, raise theirs and compute S = Q K^T by wgmma m64n64k16 from
//     shared memory (Q and K K-major, 128-byte swizzle), the online softmax in registers
//     (flash_tile.cuh's TileSoftmax on the accumulators, which are mma.sync's C layout per
//     warp), and O += P V by wgmma m64nHDk16 with P from registers (mma.sync's A layout) and V
//     read MN-major. Tile j + 1's S is issued before tile j's P V and its softmax runs while
//     P V does; O is rescaled (or its segment merged) once P V is done, so every row sees the
//     mma.sync kernel's sequence of roundings (bits: test FlashWgmmaGivesTheMmaBits).
// Tiles in shared memory: [64-value column block][64 rows][128 bytes], 16-byte chunk c of row r
// at chunk c ^ (r % 8), 1024-byte aligned. d128: 113 KB a block, two blocks an SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace pagoda::cuda::flash {

template <int HD>
struct WgGeometry {
  static constexpr int kTileBytes = kKeyTile * HD * 2;  // K, V or Q: 64 rows
  static constexpr int kStages = 2;
  static constexpr int kConsumers = 128;
  static constexpr int kOBytes = kConsumers * (HD / 2) * 4;  // merged O: [value][consumer thread]
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kTileBytes;                       // K's ring
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;  // V's ring
  static constexpr int kOOffset = kVOffset + kStages * kTileBytes;
  static constexpr int kTilesBytes = kOOffset + kOBytes;
  // The small part: K full, V full, K empty, V empty barriers (kStages each), the warps' key
  // ranges. It sits in the alignment padding before the tiles when that is large enough, else
  // after them, so the block needs no more than the tiles and 1 KB: two d128 blocks of 113 KB
  // (with the driver's 1 KB each) fill an SM's 228 KB exactly.
  static constexpr int kBarriers = 4 * kStages;
  static constexpr int kSmallBytes = kBarriers * 8 + 2 * 4 * 4;
  static constexpr int kSmemBytes = 1024 + kTilesBytes;
};
// Byte offset of 16-byte chunk c of row r in a swizzled tile.
__device__ __forceinline__ uint32_t WgChunk(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (kKeyTile * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void MbarrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarrierArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
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
template <int N>
__device__ __forceinline__ void SetMaxRegistersInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void SetMaxRegistersDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Q K^T's operand descriptors at k-step kk (16 values of the head dim) of a swizzled tile.
__device__ __forceinline__ uint64_t KMajorAt(uint32_t tile, int kk) {
  return SwizzledTileDescriptor(tile + (kk >> 2) * (kKeyTile * 128) + (kk & 3) * 32);
}
// The same as steps added to a descriptor at k-step 0 (the start address field is in 16-byte
// units; shared-memory addresses keep it below its 14 bits).
__host__ __device__ constexpr uint64_t KMajorStep(int kk) { return ((kk >> 2) * (kKeyTile * 128) + (kk & 3) * 32) >> 4; }
__host__ __device__ constexpr uint64_t VStep(int kk) { return (kk * 2048) >> 4; }
// V's descriptor for P V at k-step kk (16 keys).
__device__ __forceinline__ uint64_t VAt(uint32_t tile, int kk) {
  return SwizzledTileDescriptorMN(tile + kk * 2048, kKeyTile * 128);
}

}  // namespace pagoda::cuda::flash
