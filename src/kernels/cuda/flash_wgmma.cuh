// FlashAttention's wide (prefill) shape on Hopper warpgroup products, FlashAttention-3's
// structure. Included by flash_wgmma.cu (its kernel and launch).
//
// A block serves kGroups (1 or 2) of the mma.sync wide kernel's 64-row work (four warps of 16
// rows each) with kGroups + 1 warpgroups:
//   - the last warpgroup, the producer, lowers its registers (setmaxnreg) and copies K of tile
//     n, then V of tile n - 1, from their paged blocks into two rings of kStages stages: by TMA
//     (one thread; whole paged blocks of at least 8 slots as boxes of 64 values, the tile's
//     bytes completing on the stage's `full` mbarrier), or for smaller blocks by cp.async (every
//     thread a row chunk, each thread's copies arriving on it); each stage once the consumers
//     have arrived on its `empty` one (K runs a tile ahead: the consumers score tile n + 1 while
//     they multiply tile n's P by its V);
//   - the others, the consumers, raise theirs and each compute S = Q K^T for its 64 rows by
//     wgmma m64n64k16 with Q from registers (each thread reads its own rows' A fragments once,
//     as the mma.sync kernel does) and K K-major from shared memory, the online softmax
//     in registers (flash_tile.cuh's TileSoftmax on the accumulators, which are mma.sync's C
//     layout per warp), and O += P V by wgmma m64nHDk16 with P from registers (mma.sync's A
//     layout) and V read MN-major. Tile j + 1's S is issued before tile j's P V and its softmax
//     runs while P V does; O is rescaled (or its segment merged) after P V (at head dim 128
//     while the next tile's S runs), or, where all of a group's rows start a segment, the next
//     P V overwrites it (scale-d off), so every row sees the mma.sync kernel's sequence of
//     roundings (bits: test FlashWgmmaGivesTheMmaBits). Each consumer group walks the key range
//     of its own rows (the union of its warps'): a tile past a row's keys is masked, adds exact
//     zeros and leaves its maximum, so the bits do not depend on the rows a group shares; the
//     block's other tiles (causal: the other group's diagonal) it only waits for and releases.
// Tiles in shared memory: [64-value column block][64 rows][128 bytes], 16-byte chunk c of row r
// at chunk c ^ (r % 8), 1024-byte aligned. d128: 161 KB a (two-group) block, one an SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace pagoda::cuda::flash {

// kGroups consumer warpgroups of 64 rows each share a block's K/V stages (FlashAttention-3's
// 128-row blocks for two): two halve the K/V bytes that blocks read per query row.
template <int HD, int kGroups = 1>
struct WgGeometry {
  static constexpr int kTileBytes = kKeyTile * HD * 2;  // K or V: 64 rows
  // Two groups, d128: a fourth stage fitted beside Q's tiles (225 KB) but gave nothing (H100, 4K:
  // 257 against 260).
  static constexpr int kStages = kGroups == 1 ? 2 : (HD == 128 ? 3 : 4);
  static constexpr int kConsumers = 128 * kGroups;
  static constexpr int kOBytes = kConsumers * (HD / 2) * 4;  // merged O: [group][value][consumer thread]
  static constexpr int kKOffset = 0;                         // K's ring (Q lives in registers)
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;  // V's ring
  static constexpr int kOOffset = kVOffset + kStages * kTileBytes;
  static constexpr int kTilesBytes = kOOffset + kOBytes;
  // The small part: K full, V full, K empty, V empty barriers (kStages each), the consumer
  // warps' key ranges and segment lengths. It sits in the alignment padding before the tiles
  // when that is large enough, else after them, so the block needs no more than the tiles and
  // 1 KB.
  static constexpr int kBarriers = 4 * kStages;
  static constexpr int kSmallBytes = kBarriers * 8 + 4 * 4 * kGroups * 4;
  static constexpr int kSmemBytes = 1024 + kTilesBytes;
  static constexpr int kThreads = 128 * (kGroups + 1);
  // setmaxnreg: what the producer gives up, the consumers take (one group: two blocks an SM).
  // Two groups: 2 x 128 x 224 + 128 x 56 = the 168 x 384 registers the block is launched with;
  // the consumers use up to R219 (Q's fragments in registers), the TMA producer's block-table rows
  // and run flags spill at 40.
  static constexpr int kProducerRegs = kGroups == 1 ? 40 : 56;
  static constexpr int kConsumerRegs = kGroups == 1 ? 216 : 224;
};
// Byte offset of 16-byte chunk c of row r in a swizzled tile.
__device__ __forceinline__ uint32_t WgChunk(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (kKeyTile * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
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
