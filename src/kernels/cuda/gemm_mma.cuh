// The bf16 GEMM on mma.sync m16n8k16 for up to 64 rows (decode): tiles of BM x BN with
// cp.async stages, x read as bf16 or, for the fewest rows, as f32 rounded while the fragments
// are built. Launched by gemm.cu.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda::gemm {

inline constexpr int64_t kXF32MaxRows = 8;

// The mma.sync kernels' tiles (up to 64 rows). A stage holds the k-tile of BN weight rows (bf16,
// swizzled) and of BM rows of x: as bf16 from ConvertToBf16's output, or (kXF32, at most
// kXF32MaxRows rows, so a stage holds only those) as f32 straight from x, rounded to bf16 while
// the A fragments are built: the same bits without ConvertToBf16's launch. With more rows the
// f32 tile's traffic outweighs that launch.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, bool XF32_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr bool kXF32 = XF32_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
  static constexpr int MI = WTM / 16, NI = WTN / 8;
  // f32 x rows of 64 floats + 8 of padding: the 8 rows a fragment load touches hit distinct banks.
  static constexpr int kXRowFloats = kBK + 8;
  static constexpr int kXRows = kXF32 ? static_cast<int>(kXF32MaxRows) : BM;
  static constexpr int kWBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kWBytes + (kXF32 ? kXRows * kXRowFloats * 4 : BM * kBK * 2);
  static constexpr int kPipelineBytes = STAGES * kStageBytes;
  static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0, "warp tile");
  static_assert(!kXF32 || (MI == 1 && kXRows <= 8), "f32 x: one 16-row slice, rows 8-15 padding");
};

using TinyTile = Tile<16, 64, 1, 4, 4, true>;  // m <= kXF32MaxRows (decode of a few sequences)
using MediumTile = Tile<64, 64, 2, 2, 4, false>;  // m <= 64 (when WgTile64x64 would leave SMs idle)

template <class T, Mode kMode>
__global__ void __launch_bounds__(T::kThreads, 2) GemmMmaKernel(Args a) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
  const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
  int k_begin, k_end;
  KRange<kMode>(a, &k_begin, &k_end);
  const int num_tiles = (k_end - k_begin) / kBK;
  const uint32_t base = SmemAddr(smem);
  auto w_stage = [&](int stage) { return base + stage * T::kStageBytes; };
  auto x_stage = [&](int stage) { return base + stage * T::kStageBytes + T::kWBytes; };
  auto load_x = [&](int stage, int k0) {
    if constexpr (T::kXF32) {
      LoadXStage<T::kXRows, T::kThreads, T::kXRowFloats>(a, x_stage(stage), m0, k0, tid);
    } else {
      LoadXbStage<T::BM, T::kThreads>(a, x_stage(stage), m0, k0, tid);
    }
  };

  float acc[T::MI][T::NI][4];
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // The weights do not depend on the kernel ahead: their first stages are requested before
  // waiting for it (programmatic dependent launch); x and the outputs only after.
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < num_tiles) LoadWeightStage<T::BN, T::kThreads>(a, w_stage(s), n0, k_begin + s * kBK, tid);
  }
  if (a.pdl) GridDependencyWait();
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < num_tiles) load_x(s, k_begin + s * kBK);
    CpAsyncCommit();  // group s: x's stage s (and group 0 every early weight stage)
  }

  // A fragment rows of this thread (g and g + 8 of each 16-row slice); rows past m are zeros.
  const int g = lane >> 2, q = lane & 3;
  const int valid_rows = a.m - m0;
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<T::STAGES - 2>();
    __syncthreads();
    {
      const int next = t + T::STAGES - 1;
      if (next < num_tiles) {
        const int st = next % T::STAGES, k0 = k_begin + next * kBK;
        LoadWeightStage<T::BN, T::kThreads>(a, w_stage(st), n0, k0, tid);
        load_x(st, k0);
      }
      CpAsyncCommit();
    }
    const uint32_t sb = w_stage(t % T::STAGES), sa = x_stage(t % T::STAGES);
    const float* xs = reinterpret_cast<const float*>(smem + (t % T::STAGES) * T::kStageBytes + T::kWBytes);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[T::MI][4], bfr[T::NI][2];
#pragma unroll
      for (int i = 0; i < T::MI; ++i) {
        if constexpr (!T::kXF32) {
          const int r = wm * T::WTM + i * 16 + (lane & 15);
          LdMatrixX4(sa + Swizzle(r, kk * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
          continue;
        }
        const int r0 = wm * T::WTM + i * 16 + g;
        const float* x0 = xs + r0 * T::kXRowFloats + kk * 16 + 2 * q;
        const float2 v0 = r0 < valid_rows ? *reinterpret_cast<const float2*>(x0) : make_float2(0.f, 0.f);
        // Rows g + 8 are padding (valid_rows <= kXRows <= 8): never read, no shared memory for them.
        const float2 v1 = make_float2(0.f, 0.f);
        const float2 v2 = r0 < valid_rows ? *reinterpret_cast<const float2*>(x0 + 8) : make_float2(0.f, 0.f);
        const float2 v3 = make_float2(0.f, 0.f);
        af[i][0] = PackPair<__nv_bfloat16>(v0.x, v0.y);
        af[i][1] = PackPair<__nv_bfloat16>(v1.x, v1.y);
        af[i][2] = PackPair<__nv_bfloat16>(v2.x, v2.y);
        af[i][3] = PackPair<__nv_bfloat16>(v3.x, v3.y);
      }
#pragma unroll
      for (int j = 0; j < T::NI / 2; ++j) {
        const int r = wn * T::WTN + j * 16 + (lane & 7) + ((lane >> 4) << 3);
        LdMatrixX4(sb + Swizzle(r, kk * 2 + ((lane >> 3) & 1)), bfr[2 * j][0], bfr[2 * j][1], bfr[2 * j + 1][0],
                   bfr[2 * j + 1][1]);
      }
#pragma unroll
      for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NI; ++j) Mma<__nv_bfloat16>(acc[i][j], af[i], bfr[j]);
    }
  }
  CpAsyncWait<0>();
  AllowDependentLaunch();  // a row kernel after this GEMM launches now and waits for its end

  if constexpr (kMode == Mode::kSingle) {
    if (a.silu_out != nullptr) {
      __syncthreads();  // every warp is done with the stages: the tile goes there
      float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NI; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            tile[(wm * T::WTM + i * 16 + g + (e >> 1) * 8) * (T::BN + 4) + wn * T::WTN + j * 8 + q * 2 + (e & 1)] =
                acc[i][j][e];
          }
      __syncthreads();
      SiluPairsFromTile<T::BM, T::BN, T::kThreads>(a, tile, m0, n0, tid);
      return;
    }
  }
  // Epilogue: c0,c1 at (row lane/4, cols 2*(lane%4) + {0,1}); c2,c3 eight rows down.
#pragma unroll
  for (int i = 0; i < T::MI; ++i) {
#pragma unroll
    for (int j = 0; j < T::NI; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm * T::WTM + i * 16 + g + (e >> 1) * 8;
        const int col = n0 + wn * T::WTN + j * 8 + q * 2 + (e & 1);
        StoreOutput<kMode>(a, row, col, acc[i][j][e]);
      }
    }
  }
  if constexpr (kMode == Mode::kPartialReduce) ReduceTileIfLast<T::BM, T::BN, T::kThreads>(a, m0, n0, tid);
}

}  // namespace pagoda::cuda::gemm
