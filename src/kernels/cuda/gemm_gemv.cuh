// The bf16 GEMM for up to 8 rows of a weight cut into k chunks (decode's q|k|v, o and down):
// one block per 16 output columns, one warp per k chunk, the warps' chunk sums added in chunk
// order inside the block. Launched by gemm.cu.
//
// Why a warp per chunk: the (16-column tile, chunk) blocks of the mma.sync kernel end with
// each tile's last block reading every chunk's partial sums back from L2 after a fence and an
// atomic, a chain of round trips that every tile waits for at the end of the launch. Here the
// chunks meet in shared memory behind one __syncthreads. The bits are the mma.sync kernel's:
// each warp runs its chunk's k-tiles in order from a zero accumulator with the same m16n8k16
// products (TinyTile's warps also cover 16 columns), and the block adds the chunk sums as
// ReduceTileIfLast does, ((c0 + c1) + c2) + c3, then to y when accumulating.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemm_mma.cuh"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda::gemm {

struct GemvTile {
  static constexpr int BN = 16;         // output columns a block (two n8 products a warp)
  static constexpr int kStages = 6;     // per warp: 2 KB of weights a stage
  static constexpr int kXRows = static_cast<int>(kXF32MaxRows);  // x's rows a stage holds at most
  static constexpr int kXRowFloats = kBK + 8;  // as TinyTile's f32 x rows
  static constexpr int kWBytes = BN * kBK * 2;
  // A stage: the weight k-tile, then x's rows (m of them, f32), rounded up to 128 bytes so that
  // the next stage's swizzled rows stay aligned.
  static __host__ __device__ constexpr int StageBytes(int m) {
    return (kWBytes + m * kXRowFloats * 4 + 127) / 128 * 128;
  }
  // The reduction's area after the warps' stages: [chunks][kXRows][BN] floats.
  static __host__ __device__ constexpr int SmemBytes(int m, int chunks) {
    return chunks * kStages * StageBytes(m) + chunks * kXRows * BN * 4;
  }
};

// blockDim.x = 32 x chunks (at most kMaxChunks); grid.x = ceil(n / 16); a.m <= kXF32MaxRows.
__global__ void __launch_bounds__(32 * kMaxChunks) GemvChunksKernel(Args a) {
  using T = GemvTile;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int lane = threadIdx.x & 31, z = threadIdx.x >> 5;
  const int chunks = blockDim.x >> 5;
  const int n0 = blockIdx.x * T::BN;
  const int k_begin = z * a.chunk, k_end = min(a.kp, k_begin + a.chunk);
  const int num_tiles = (k_end - k_begin) / kBK;
  const int stage_bytes = T::StageBytes(a.m);
  uint8_t* const stages = smem + z * T::kStages * stage_bytes;  // this warp's
  const uint32_t base = SmemAddr(stages);
  auto w_stage = [&](int s) { return base + s * stage_bytes; };
  auto x_stage = [&](int s) { return base + s * stage_bytes + T::kWBytes; };

  // The weights first (they do not depend on the kernel ahead), then x once it is written.
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < num_tiles) LoadWeightStage<T::BN, 32>(a, w_stage(s), n0, k_begin + s * kBK, lane);
  }
  if (a.pdl) GridDependencyWait();
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < num_tiles) LoadXStage<T::kXRows, 32, T::kXRowFloats>(a, x_stage(s), 0, k_begin + s * kBK, lane);
    CpAsyncCommit();
  }

  float acc[2][2] = {};  // rows g (the only real rows: m <= 8) of the two n8 products
  const int g = lane >> 2, q = lane & 3;
  const bool row_ok = g < a.m;
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<T::kStages - 2>();
    __syncwarp();  // the stage's copies are visible to every lane, and the stage refilled next was
                   // read by every lane in the previous round
    {
      const int next = t + T::kStages - 1;
      if (next < num_tiles) {
        const int st = next % T::kStages, k0 = k_begin + next * kBK;
        LoadWeightStage<T::BN, 32>(a, w_stage(st), n0, k0, lane);
        LoadXStage<T::kXRows, 32, T::kXRowFloats>(a, x_stage(st), 0, k0, lane);
      }
      CpAsyncCommit();
    }
    const int st = t % T::kStages;
    const uint32_t sb = w_stage(st);
    const float* xs = reinterpret_cast<const float*>(stages + st * stage_bytes + T::kWBytes);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const float* x0 = xs + g * T::kXRowFloats + kk * 16 + 2 * q;
      const float2 v0 = row_ok ? *reinterpret_cast<const float2*>(x0) : make_float2(0.f, 0.f);
      const float2 v2 = row_ok ? *reinterpret_cast<const float2*>(x0 + 8) : make_float2(0.f, 0.f);
      const uint32_t af[4] = {PackPair<__nv_bfloat16>(v0.x, v0.y), 0u, PackPair<__nv_bfloat16>(v2.x, v2.y), 0u};
      uint32_t bfr[2][2];
      const int r = (lane & 7) + ((lane >> 4) << 3);
      LdMatrixX4(sb + Swizzle(r, kk * 2 + ((lane >> 3) & 1)), bfr[0][0], bfr[0][1], bfr[1][0], bfr[1][1]);
      MmaRows<__nv_bfloat16, true>(acc[0], af, bfr[0]);
      MmaRows<__nv_bfloat16, true>(acc[1], af, bfr[1]);
    }
  }
  CpAsyncWait<0>();
  AllowDependentLaunch();  // a row kernel after this GEMM launches now and waits for its end

  // Chunk z's sums for rows g, columns 8 j + 2 q + e, then the block adds the chunks in order.
  float* red = reinterpret_cast<float*>(smem + chunks * T::kStages * stage_bytes);
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) red[(z * T::kXRows + g) * T::BN + j * 8 + 2 * q + e] = acc[j][e];
  __syncthreads();
  for (int i = threadIdx.x; i < a.m * T::BN; i += blockDim.x) {
    const int row = i / T::BN, col = i % T::BN;
    if (n0 + col >= a.n) continue;
    float total = red[row * T::BN + col];
    for (int c = 1; c < chunks; ++c) total = __fadd_rn(total, red[(c * T::kXRows + row) * T::BN + col]);
    StoreSum(a, row, n0 + col, total);
  }
}

}  // namespace pagoda::cuda::gemm
