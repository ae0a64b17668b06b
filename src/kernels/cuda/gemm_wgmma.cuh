// The bf16 GEMM on Hopper's warpgroup products (wgmma): 64 x 64 / 64 x 128 tiles for 9-64 rows,
// 128 x 256 where CUTLASS's kernels cannot take the operands. Launched by gemm.cu.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace pagoda::cuda::gemm {

// ---- Hopper: warpgroup products (wgmma) ----
//
// The same stages, chunk modes and epilogue as GemmMmaKernel; each warpgroup multiplies its 64
// rows of the tile by the BN columns with wgmma m64nBNk16 straight from the swizzled stages (no
// fragments through registers), and tile t's products run while tile t + 1 lands. Every chunk
// starts from zeroed accumulators and adds its k-steps of 16 in order: the mma.sync kernel's
// sums, bit for bit (tested: rows of 1..64-row products, mma.sync, equal the same rows of a
// 300-row one, wgmma).
template <int WG_, int BN_, int STAGES_>
struct WgTile {
  static constexpr int WG = WG_, BM = 64 * WG_, BN = BN_, STAGES = STAGES_;
  static constexpr int kThreads = 128 * WG;
  static constexpr int kStageBytes = (BM + BN) * kBK * 2;
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;  // + alignment slack
  static constexpr int kAcc = BN / 2;  // f32 accumulators per thread
};

using WgTile128x256 = WgTile<2, 256, 4>;  // m > 64
using WgTile64x64 = WgTile<1, 64, 6>;      // m <= 64, usually
using WgTile64x128 = WgTile<1, 128, 4>;    // m <= 64, wide weights: x read half as often

template <class T, Mode kMode>
__global__ void __launch_bounds__(T::kThreads, 1) GemmWgmmaKernel(Args a) {
  extern __shared__ __align__(1024) uint8_t dynamic_smem[];
  // The 128-byte swizzle repeats every 1024 bytes: stages start at a multiple of it.
  uint8_t* smem = dynamic_smem + ((1024 - (SmemAddr(dynamic_smem) & 1023)) & 1023);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = tid >> 7;
  const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
  int k_begin, k_end;
  KRange<kMode>(a, &k_begin, &k_end);
  const int num_tiles = (k_end - k_begin) / kBK;
  auto load_tile = [&](int stage, int t) {
    LoadBf16Stage<T::BM, T::BN, T::kThreads>(a, smem + stage * T::kStageBytes, m0, n0, k_begin + t * kBK, tid);
  };

  float acc[T::kAcc];
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) acc[i] = 0.0f;
  // As in GemmMmaKernel: the first weight stages before waiting on the kernel ahead (pdl).
  const uint32_t base = SmemAddr(smem);
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < num_tiles) {
      LoadWeightStage<T::BN, T::kThreads>(a, base + s * T::kStageBytes + T::BM * kBK * 2, n0, k_begin + s * kBK, tid);
    }
  }
  if (a.pdl) GridDependencyWait();
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < num_tiles) LoadXbStage<T::BM, T::kThreads>(a, base + s * T::kStageBytes, m0, k_begin + s * kBK, tid);
    CpAsyncCommit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<T::STAGES - 2>();
    FenceProxyAsyncShared();
    __syncthreads();
    const uint32_t stage = SmemAddr(smem + (t % T::STAGES) * T::kStageBytes);
    const uint32_t sa = stage + wg * 64 * kBK * 2, sb = stage + T::BM * kBK * 2;
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      Wgmma<T::BN>(acc, SwizzledTileDescriptor(sa + kk * 32), SwizzledTileDescriptor(sb + kk * 32), 1);
    }
    WgmmaCommit();
    WgmmaWait<1>();  // tile t - 1's products are done in this warpgroup ...
    __syncthreads();  // ... and in the other: its stage may be refilled
    const int next = t + T::STAGES - 1;
    if (next < num_tiles) load_tile(next % T::STAGES, next);
    CpAsyncCommit();
  }
  WgmmaWait<0>();
  CpAsyncWait<0>();
  AllowDependentLaunch();  // a row kernel after this GEMM launches now and waits for its end

  if constexpr (kMode == Mode::kSingle && T::WG == 1) {
    if (a.silu_out != nullptr) {
      __syncthreads();  // both products' reads of the stages are done: the tile goes there
      float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int j = 0; j < T::BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          tile[((warp & 3) * 16 + (lane >> 2) + (e >> 1) * 8) * (T::BN + 4) + j * 8 + (lane & 3) * 2 + (e & 1)] =
              acc[4 * j + e];
        }
      __syncthreads();
      SiluPairsFromTile<T::BM, T::BN, T::kThreads>(a, tile, m0, n0, tid);
      return;
    }
  }
  // Warp w of warpgroup g holds rows 64g + 16(w % 4) + lane / 4 (+8), columns 8j + 2(lane % 4) (+1).
#pragma unroll
  for (int j = 0; j < T::BN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = m0 + wg * 64 + (warp & 3) * 16 + (lane >> 2) + (e >> 1) * 8;
      const int col = n0 + j * 8 + (lane & 3) * 2 + (e & 1);
      StoreOutput<kMode>(a, row, col, acc[4 * j + e]);
    }
  }
  if constexpr (kMode == Mode::kPartialReduce) ReduceTileIfLast<T::BM, T::BN, T::kThreads>(a, m0, n0, tid);
}

}  // namespace pagoda::cuda::gemm
