#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm_cutlass.h"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kBK = static_cast<int>(kGemmKTile);  // k values per tile: 128 bytes of bf16 a row

// A tile row is 64 bf16 = 8 chunks of 16 bytes; chunk c of row r sits at chunk c ^ (r % 8), so
// the 8 rows an ldmatrix reads at one logical chunk land in 8 different bank groups.
__device__ __forceinline__ uint32_t Swizzle(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

struct Args {
  const float* x;      // [m, k] f32 (the mma.sync kernels read and round it themselves)
  int64_t x_stride;
  bool x_vec;          // x and its row stride allow 16-byte copies
  int k;
  const uint16_t* xb;  // [m, kp] bf16 (the wgmma kernel's input, ConvertToBf16's output)
  const uint16_t* w;   // [n, kp] bf16
  int m, n, kp;
  int chunk;  // k values per chunk (multiple of kBK)
  float* y;
  int64_t y_stride;
  bool accumulate;
  float* partial;  // [splits, m, n]
  int* counters;   // kPartialReduce: one per output tile, zero between launches
  bool pdl;        // launched as a programmatic dependent of the kernel ahead of it
  float* silu_out;  // kSingle: y's gate|up pairs of 16 columns -> silu(gate) * up here instead of y
  int64_t silu_stride;
  uint16_t* silu_bf16;  // and rounded to bf16 here ([m, n / 2]), or null
};

// How a block runs the k chunks.
enum class Mode {
  kSingle,         // one chunk: the block's sum is the result
  kPartial,        // block z sums chunk z into `partial`; ReduceChunks adds them in order
  kPartialReduce,  // the same planes; the tile's last block to finish adds them in order
};

// The mma.sync kernels' tiles (up to 64 rows). A stage holds the k-tile of BN weight rows (bf16,
// swizzled) and of BM rows of x: as bf16 from ConvertToBf16's output, or (kXF32, the fewest
// rows) as f32 straight from x, rounded to bf16 while the A fragments are built: the same bits
// without ConvertToBf16's launch. With more rows the f32 tile's traffic outweighs that launch.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, bool XF32_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr bool kXF32 = XF32_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
  static constexpr int MI = WTM / 16, NI = WTN / 8;
  // f32 x rows of 64 floats + 8 of padding: the 8 rows a fragment load touches hit distinct banks.
  static constexpr int kXRowFloats = kBK + 8;
  static constexpr int kWBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kWBytes + (kXF32 ? BM * kXRowFloats * 4 : BM * kBK * 2);
  static constexpr int kPipelineBytes = STAGES * kStageBytes;
  static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0, "warp tile");
};

inline constexpr int64_t kXF32MaxRows = 8;
using TinyTile = Tile<16, 64, 1, 4, 4, true>;     // m <= kXF32MaxRows (decode of a few sequences)
using MediumTile = Tile<64, 64, 2, 2, 4, false>;  // m <= 64 (when WgTile64x64 would leave SMs idle)

// Copies k-tile [k0, k0 + 64) of ROWS rows r0.. of a bf16 matrix [*, kp] into a stage (rows
// of 128 bytes, swizzled; rows at or past `limit` zero-filled).
template <int ROWS, int kThreads>
__device__ __forceinline__ void LoadBf16Rows(const uint16_t* src, int kp, int r0, int limit, uint32_t dst, int k0,
                                             int tid) {
#pragma unroll
  for (int i = tid; i < ROWS * 8; i += kThreads) {
    const int r = i >> 3, c = i & 7;
    const bool ok = r0 + r < limit;
    CpAsync16(dst + Swizzle(r, c), src + static_cast<int64_t>(ok ? r0 + r : 0) * kp + k0 + c * 8, ok);
  }
}

// The k-tile of W's BN rows n0.. (a stage's weight part).
template <int BN, int kThreads>
__device__ __forceinline__ void LoadWeightStage(const Args& a, uint32_t sb, int n0, int k0, int tid) {
  LoadBf16Rows<BN, kThreads>(a.w, a.kp, n0, a.n, sb, k0, tid);
}

// Copies k-tile [k0, k0 + 64) of x's rows m0.. (those below m) into a stage as f32, zeros past k.
template <int BM, int kThreads, int kXRowFloats>
__device__ __forceinline__ void LoadXStage(const Args& a, uint32_t sx, int m0, int k0, int tid) {
  const int rows = min(BM, a.m - m0);
  if (a.x_vec) {
    for (int i = tid; i < rows * 16; i += kThreads) {
      const int r = i >> 4, c = i & 15, col = k0 + c * 4;
      const int bytes = max(0, min(16, (a.k - col) * 4));
      const float* src = bytes > 0 ? a.x + static_cast<int64_t>(m0 + r) * a.x_stride + col : a.x;
      CpAsync16Bytes(sx + (r * kXRowFloats + c * 4) * 4, src, bytes);
    }
  } else {
    for (int i = tid; i < rows * kBK; i += kThreads) {
      const int r = i / kBK, c = i % kBK, col = k0 + c;
      const bool ok = col < a.k;
      CpAsync4(sx + (r * kXRowFloats + c) * 4, ok ? a.x + static_cast<int64_t>(m0 + r) * a.x_stride + col : a.x, ok);
    }
  }
}

// The k-tile of xb's BM rows m0.. (rows past m zeros).
template <int BM, int kThreads>
__device__ __forceinline__ void LoadXbStage(const Args& a, uint32_t sa, int m0, int k0, int tid) {
  LoadBf16Rows<BM, kThreads>(a.xb, a.kp, m0, a.m, sa, k0, tid);
}

// The wgmma kernel's stage: the k-tile of xb's BM rows, then of W's BN rows.
template <int BM, int BN, int kThreads>
__device__ __forceinline__ void LoadBf16Stage(const Args& a, uint8_t* stage, int m0, int n0, int k0, int tid) {
  const uint32_t sa = SmemAddr(stage);
  LoadXbStage<BM, kThreads>(a, sa, m0, k0, tid);
  LoadWeightStage<BN, kThreads>(a, sa + BM * kBK * 2, n0, k0, tid);
}

// The block's k range: all of k, or chunk blockIdx.z.
template <Mode kMode>
__device__ __forceinline__ void KRange(const Args& a, int* begin, int* end) {
  *begin = 0;
  *end = a.kp;
  if constexpr (kMode != Mode::kSingle) {
    *begin = blockIdx.z * a.chunk;
    *end = min(a.kp, *begin + a.chunk);
  }
}

// Output (row, col) of the block's sum: to its partial plane or y (+=).
template <Mode kMode>
__device__ __forceinline__ void StoreOutput(const Args& a, int row, int col, float v) {
  if (row >= a.m || col >= a.n) return;
  if constexpr (kMode != Mode::kSingle) {
    a.partial[(static_cast<int64_t>(blockIdx.z) * a.m + row) * a.n + col] = v;
  } else {
    float* out = a.y + row * a.y_stride + col;
    *out = a.accumulate ? __fadd_rn(*out, v) : v;
  }
}

// The gate|up product's fused SiLU (a.silu_out): the block's BM x BN outputs, stored by the
// kernel into `tile` (row stride BN + 4 floats, in the pipeline's shared memory once the products
// are done), give out[row, n0 / 2 + o] = silu(gate) * up for the tile's BN / 2 pairs; the same
// Silu as the paired SiLU kernel that follows the larger products, on the same values.
template <int BM, int BN, int kThreads>
__device__ __forceinline__ void SiluPairsFromTile(const Args& a, const float* tile, int m0, int n0, int tid) {
  constexpr int kOut = BN / 2, kLd = BN + 4;
  const int rows = min(BM, a.m - m0);
  for (int i = tid; i < rows * kOut; i += kThreads) {
    const int r = i / kOut, o = i % kOut;
    const int c = (o / 16) * 32 + o % 16;  // the gate's column in the tile; up is 16 further
    if (n0 + c >= a.n) continue;
    const float v = Silu(tile[r * kLd + c]) * tile[r * kLd + c + 16];
    a.silu_out[static_cast<int64_t>(m0 + r) * a.silu_stride + n0 / 2 + o] = v;
    if (a.silu_bf16 != nullptr) {
      reinterpret_cast<__nv_bfloat16*>(a.silu_bf16)[static_cast<int64_t>(m0 + r) * (a.n / 2) + n0 / 2 + o] =
          __float2bfloat16_rn(v);
    }
  }
}

// kPartialReduce: after the block's partial sums are stored, the last of the tile's gridDim.z
// blocks to arrive adds the planes in chunk order (the ReduceChunks kernel's sums) into y. The
// planes are read four columns at a time, every chunk's values requested before any is added
// (a tile of 64 rows would otherwise wait on L2 once per value).
inline constexpr int kMaxChunks = 4;  // GemmSplitsFor's most chunks

__device__ __forceinline__ void StoreSum(const Args& a, int row, int col, float total) {
  float* out = a.y + row * a.y_stride + col;
  *out = a.accumulate ? __fadd_rn(*out, total) : total;
}

template <int BM, int BN, int kThreads>
__device__ __forceinline__ void ReduceTileIfLast(const Args& a, int m0, int n0, int tid) {
  __shared__ int last;
  __threadfence();  // this block's partial sums are visible before it is counted
  __syncthreads();
  if (tid == 0) {
    int* counter = a.counters + blockIdx.y * gridDim.x + blockIdx.x;
    last = atomicAdd(counter, 1) == static_cast<int>(gridDim.z) - 1;
    if (last) atomicExch(counter, 0);  // every block has counted: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t plane = static_cast<int64_t>(a.m) * a.n;
  const int chunks = static_cast<int>(gridDim.z);
  const int rows = min(BM, a.m - m0);
  if (a.n % 4 == 0 && chunks <= kMaxChunks) {
    constexpr int kVecs = BN / 4, kBatch = 2;  // float4s a row; float4s a thread has in flight
    const int total = rows * kVecs;
    for (int first = tid; first < total; first += kThreads * kBatch) {
      float4 part[kMaxChunks][kBatch];
      int row[kBatch], col[kBatch];
      bool ok[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = first + b * kThreads;
        row[b] = m0 + i / kVecs;
        col[b] = n0 + (i % kVecs) * 4;
        ok[b] = i < total && col[b] < a.n;
#pragma unroll
        for (int z = 0; z < kMaxChunks; ++z) {
          if (ok[b] && z < chunks) {
            part[z][b] = __ldcg(reinterpret_cast<const float4*>(a.partial + z * plane +
                                                                 static_cast<int64_t>(row[b]) * a.n + col[b]));
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (!ok[b]) continue;
        float4 t = part[0][b];
#pragma unroll
        for (int z = 1; z < kMaxChunks; ++z) {
          if (z < chunks) {
            t.x = __fadd_rn(t.x, part[z][b].x);
            t.y = __fadd_rn(t.y, part[z][b].y);
            t.z = __fadd_rn(t.z, part[z][b].z);
            t.w = __fadd_rn(t.w, part[z][b].w);
          }
        }
        StoreSum(a, row[b], col[b], t.x);
        StoreSum(a, row[b], col[b] + 1, t.y);
        StoreSum(a, row[b], col[b] + 2, t.z);
        StoreSum(a, row[b], col[b] + 3, t.w);
      }
    }
    return;
  }
  for (int i = tid; i < rows * BN; i += kThreads) {
    const int row = m0 + i / BN, col = n0 + i % BN;
    if (col >= a.n) continue;
    const float* p = a.partial + static_cast<int64_t>(row) * a.n + col;
    float total = __ldcg(p);
    for (int z = 1; z < chunks; ++z) total = __fadd_rn(total, __ldcg(p + z * plane));
    StoreSum(a, row, col, total);
  }
}

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
      LoadXStage<T::BM, T::kThreads, T::kXRowFloats>(a, x_stage(stage), m0, k0, tid);
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
        const int r0 = wm * T::WTM + i * 16 + g, r1 = r0 + 8;
        const float* x0 = xs + r0 * T::kXRowFloats + kk * 16 + 2 * q;
        const float* x1 = xs + r1 * T::kXRowFloats + kk * 16 + 2 * q;
        const float2 v0 = r0 < valid_rows ? *reinterpret_cast<const float2*>(x0) : make_float2(0.f, 0.f);
        const float2 v1 = r1 < valid_rows ? *reinterpret_cast<const float2*>(x1) : make_float2(0.f, 0.f);
        const float2 v2 = r0 < valid_rows ? *reinterpret_cast<const float2*>(x0 + 8) : make_float2(0.f, 0.f);
        const float2 v3 = r1 < valid_rows ? *reinterpret_cast<const float2*>(x1 + 8) : make_float2(0.f, 0.f);
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

// ---- Hopper: warpgroup products (wgmma) ----
//
// The same stages, chunk modes and epilogue as GemmBf16Kernel; each warpgroup multiplies its 64
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

// y (+)= p[0] + p[1] + ... in chunk order.
__global__ void ReduceChunksKernel(const float* partial, int splits, int m, int n, float* y, int64_t y_stride,
                                   bool accumulate) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(m) * n) return;
  const int64_t plane = static_cast<int64_t>(m) * n;
  float total = partial[i];
  for (int s = 1; s < splits; ++s) total = __fadd_rn(total, partial[s * plane + i]);
  float* out = y + (i / n) * y_stride + i % n;
  *out = accumulate ? __fadd_rn(*out, total) : total;
}

__global__ void ConvertToBf16Kernel(const float* x, int64_t x_stride, int rows, int cols, int cols_padded,
                                    __nv_bfloat16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * cols_padded) return;
  const int64_t r = i / cols_padded, c = i % cols_padded;
  out[i] = __float2bfloat16_rn(c < cols ? x[r * x_stride + c] : 0.0f);
}

// The same conversion, eight columns a thread (two 16-byte loads, one 16-byte store) and 32-bit
// index arithmetic, for 16-byte aligned rows; the tail of a row past `cols` is zeros.
// Launched as a programmatic dependent (decode, up to 64 rows), it starts while the row kernel
// ahead drains and lets the GEMM after it in at once, so that GEMM's first weight stages stream
// during the conversion; both wait for their inputs in GridDependencyWait.
__global__ void ConvertToBf16x8Kernel(const float* x, int64_t x_stride, int rows, int cols, int cols_padded,
                                      __nv_bfloat16* out) {
  AllowDependentLaunch();
  GridDependencyWait();
  const uint32_t chunks = static_cast<uint32_t>(cols_padded) / 8;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= static_cast<uint32_t>(rows) * chunks) return;
  const uint32_t r = i / chunks, c = (i - r * chunks) * 8;
  const float* src = x + r * x_stride + c;
  float v[8];
  if (static_cast<int>(c) + 8 <= cols) {
    const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = static_cast<int>(c) + j < cols ? src[j] : 0.0f;
  }
  __align__(16) __nv_bfloat16 b[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) b[j] = __float2bfloat16_rn(v[j]);
  *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * cols_padded + c) = *reinterpret_cast<const uint4*>(b);
}

// T's kernel for kMode and its dynamic shared memory; the first call sets the kernel's limit.
template <class T, Mode kMode>
std::pair<void (*)(Args), int> KernelFor() {
  constexpr bool kWgmma = requires { T::WG; };
  void (*kernel)(Args) = nullptr;
  int smem = 0;
  if constexpr (kWgmma) {
    kernel = GemmWgmmaKernel<T, kMode>;
    smem = T::kSmemBytes;
  } else {
    kernel = GemmMmaKernel<T, kMode>;
    smem = T::kPipelineBytes;
  }
  static bool configured = false;
  if (!configured) {
    PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured = true;
  }
  return {kernel, smem};
}

// How many of T's blocks (kMode) run at once on the current GPU (resident per SM x SMs).
template <class T, Mode kMode>
int64_t ConcurrentBlocks() {
  static const int64_t blocks = [] {
    const auto [kernel, smem] = KernelFor<T, kMode>();
    int per_sm = 0;
    PAGODA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, T::kThreads, smem));
    return std::max<int64_t>(1, static_cast<int64_t>(per_sm) * SmCount());
  }();
  return blocks;
}

// The share of the busy block slots that do work when `blocks` blocks run `slots` at a time.
double WaveEfficiency(int64_t blocks, int64_t slots) {
  const int64_t waves = (blocks + slots - 1) / slots;
  return static_cast<double>(blocks) / static_cast<double>(waves * slots);
}

// One launch over T's tiles (and chunks): the wgmma kernel for WgTile shapes, the mma.sync one
// otherwise. a.pdl launches it as a programmatic dependent (its weight loads start while the
// kernel ahead finishes).
template <class T, Mode kMode>
void Launch(const Args& a, int splits, cudaStream_t stream) {
  const auto [kernel, smem] = KernelFor<T, kMode>();
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((a.n + T::BN - 1) / T::BN, (a.m + T::BM - 1) / T::BM, kMode == Mode::kSingle ? 1 : splits);
  config.blockDim = dim3(T::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (a.pdl) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  PAGODA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
}

// f32 weights: a 64 x 64 output tile per block, 4 x 4 outputs per thread, k in order.
__global__ void __launch_bounds__(256) GemmF32Kernel(const float* x, int64_t x_stride, int m, const float* w, int n,
                                                     int k, float* y, int64_t y_stride, bool accumulate) {
  __shared__ float xs[16][64 + 1];
  __shared__ float ws[16][64 + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += 16) {
    for (int i = threadIdx.x; i < 64 * 16; i += 256) {
      const int r = i / 16, kk = i % 16;
      const bool kin = k0 + kk < k;
      xs[kk][r] = (m0 + r < m && kin) ? x[static_cast<int64_t>(m0 + r) * x_stride + k0 + kk] : 0.0f;
      ws[kk][r] = (n0 + r < n && kin) ? w[static_cast<int64_t>(n0 + r) * k + k0 + kk] : 0.0f;
    }
    __syncthreads();
    const int kn = min(16, k - k0);
    for (int kk = 0; kk < kn; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (row >= m || col >= n) continue;
      float* out = y + static_cast<int64_t>(row) * y_stride + col;
      *out = accumulate ? __fadd_rn(*out, acc[i][j]) : acc[i][j];
    }
  }
}

}  // namespace

bool GemmConvertsX(int64_t m) { return m > kXF32MaxRows; }

GemmSplits GemmSplitsFor(int64_t n, int64_t k_padded) {
  // Enough (tile, chunk) blocks for every SM of a large GPU at m = 1 (64-wide tiles), chunks
  // of at least 512 values, at most 4 chunks (the partial sums' traffic grows with them).
  constexpr int64_t kTargetBlocks = 256, kMinChunk = 512, kMaxSplits = kMaxChunks;
  const int64_t tiles = (n + 63) / 64;
  int64_t splits = 1;
  while (splits < kMaxSplits && tiles * splits < kTargetBlocks && k_padded / (splits * 2) >= kMinChunk) splits *= 2;
  GemmSplits s;
  const int64_t tiles_k = k_padded / kGemmKTile;
  const int64_t tiles_per_chunk = (tiles_k + splits - 1) / splits;
  s.chunk = std::max<int64_t>(1, tiles_per_chunk) * kGemmKTile;
  s.splits = static_cast<int32_t>(std::max<int64_t>(1, (k_padded + s.chunk - 1) / s.chunk));
  return s;
}

int64_t GemmBf16PartialFloats(int64_t m, int64_t n, const GemmSplits& s) {
  if (s.splits <= 1) return 0;
  const int64_t planes = s.splits * std::min(m, kGemmPartialMaxRows) * n;
  return m > MediumTile::BM ? planes + kGemmSplitKLockFloats : planes;
}

void ConvertToBf16(const float* x, int64_t x_stride, int64_t rows, int64_t cols, int64_t cols_padded, uint16_t* out,
                   cudaStream_t stream, bool pdl) {
  const int64_t total = rows * cols_padded;
  if (total == 0) return;
  if (Aligned16(x) && Aligned16(out) && x_stride % 4 == 0 && cols_padded % 8 == 0 && total / 8 < (int64_t{1} << 31)) {
    const int64_t threads = total / 8;
    LaunchDependent(ConvertToBf16x8Kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0, stream, pdl,
                    x, x_stride, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(cols_padded),
                    reinterpret_cast<__nv_bfloat16*>(out));
    return;
  }
  ConvertToBf16Kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      x, x_stride, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(cols_padded),
      reinterpret_cast<__nv_bfloat16*>(out));
  PAGODA_CUDA_CHECK_LAUNCH("ConvertToBf16Kernel");
}

bool GemmFusesSilu(const GemmBf16Params& p) {
  return p.m <= MediumTile::BM && p.splits.splits == 1 && p.n % 32 == 0 && !p.accumulate;
}

// Split-K's serialized reduction through global memory beats the chained products up to about
// a thousand rows and loses beyond (H200, Llama-3-8B's q|k|v, o, down: 512 rows 77 / 57 / 129 us
// against 90 / 59 / 132; 4096 rows 540 / 376 / 973 against 514 / 372 / 925).
constexpr int64_t kSplitKMaxRows = 1024;

// CUTLASS for many rows, in the chunk order of the m <= 64 kernels (total = ((c0 + c1) + c2) +
// c3, rounded after each add, as ReduceChunks sums; then y + total when accumulating). One chunk:
// y (+)= x W^T in the epilogue. Equal chunks and up to kSplitKMaxRows rows: CUTLASS's split-K
// with the chunks as splits. Else one product per chunk, each adding the previous chunks' sum as
// its C, in slabs of up to splits x kGemmPartialMaxRows rows (the partial scratch): the running
// sum in one plane updated in place, the last chunk writing y directly, or the plane then added
// to y. False where the operands do not suit TMA.
static bool GemmCutlassRows(const GemmBf16Params& p, cudaStream_t stream) {
  const int splits = p.splits.splits;
  GemmCutlassParams c;
  c.a = p.xb;
  c.lda = p.k_padded;
  c.b = p.w;
  c.ldb = p.k_padded;
  c.n = p.n;
  if (splits == 1) {
    c.m = p.m;
    c.k = p.k_padded;
    c.add_c = p.accumulate;
    c.c = c.d = p.y;
    c.ldc = c.ldd = p.y_stride;
    if (!GemmCutlassSupported(c)) return false;
    GemmCutlass(c, stream);
    return true;
  }
  if (p.splits.chunk * splits == p.k_padded && p.m <= kSplitKMaxRows) {
    // Equal chunks, up to kSplitKMaxRows rows: one split-K product, its partial sums in the
    // partial scratch and y (+)= the total in the last split's epilogue.
    GemmCutlassParams sk = c;
    sk.k = p.k_padded;
    sk.splits = splits;
    sk.add_c = p.accumulate;
    sk.c = sk.d = p.y;
    sk.ldc = sk.ldd = p.y_stride;
    sk.workspace = p.partial;
    sk.workspace_bytes = static_cast<size_t>(GemmBf16PartialFloats(p.m, p.n, p.splits)) * sizeof(float);
    // As many rows a launch as the scratch holds the partial sums of (all of them, normally).
    int64_t slab = std::min<int64_t>(p.m, splits * kGemmPartialMaxRows);
    sk.m = slab;
    while (slab > 128 && GemmCutlassWorkspace(sk) > sk.workspace_bytes) sk.m = slab -= 128;
    if (GemmCutlassSupported(sk)) {
      for (int64_t r0 = 0; r0 < p.m; r0 += slab) {
        GemmCutlassParams s = sk;
        s.a = p.xb + r0 * p.k_padded;
        s.m = std::min(slab, p.m - r0);
        s.c = s.d = p.y + r0 * p.y_stride;
        GemmCutlass(s, stream);
      }
      return true;
    }
  }
  const int64_t slab = splits * kGemmPartialMaxRows;
  const bool direct = !p.accumulate;  // the last chunk writes y
  {
    GemmCutlassParams probe = c;
    probe.m = std::min(slab, p.m);
    probe.k = p.splits.chunk;
    probe.add_c = true;
    probe.chained = true;
    probe.c = probe.d = p.partial;
    probe.ldc = probe.ldd = p.n;
    if (!GemmCutlassSupported(probe)) return false;
    probe.d = p.y;
    probe.ldd = p.y_stride;
    if (direct && !GemmCutlassSupported(probe)) return false;
  }
  for (int64_t r0 = 0; r0 < p.m; r0 += slab) {
    const int64_t rows = std::min(slab, p.m - r0);
    for (int chunk = 0; chunk < splits; ++chunk) {
      const int64_t k0 = chunk * p.splits.chunk;
      GemmCutlassParams s = c;
      s.a = p.xb + r0 * p.k_padded + k0;
      s.b = p.w + k0;
      s.m = rows;
      s.k = std::min(p.splits.chunk, p.k_padded - k0);
      s.add_c = chunk > 0;
      s.chained = true;
      s.c = p.partial;
      s.ldc = p.n;
      const bool last = chunk == splits - 1;
      s.d = last && direct ? p.y + r0 * p.y_stride : p.partial;
      s.ldd = last && direct ? p.y_stride : p.n;
      GemmCutlass(s, stream);
    }
    if (!direct) {
      const int64_t total = rows * p.n;
      ReduceChunksKernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
          p.partial, 1, static_cast<int>(rows), static_cast<int>(p.n), p.y + r0 * p.y_stride, p.y_stride, true);
      PAGODA_CUDA_CHECK_LAUNCH("ReduceChunksKernel");
    }
  }
  return true;
}

void GemmBf16(const GemmBf16Params& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return;
  if (p.silu_out != nullptr && !GemmFusesSilu(p)) {
    // The product into y, then the paired SiLU kernel.
    GemmBf16Params product = p;
    product.silu_out = nullptr;
    GemmBf16(product, stream);
    SiluMulPairs16(p.y, p.y_stride, p.silu_out, p.silu_stride, p.m, p.n / 2, stream, p.pdl && p.m <= MediumTile::BM);
    return;
  }
  PAGODA_CHECK(p.k_padded % kGemmKTile == 0 && p.k_padded >= p.k && p.splits.chunk % kGemmKTile == 0)
      << "GemmBf16: bad padding (k " << p.k << ", padded " << p.k_padded << ", chunk " << p.splits.chunk << ")";
  const int splits = p.splits.splits;
  PAGODA_CHECK(splits == 1 || p.partial != nullptr) << "GemmBf16: no scratch for the partial sums";
  PAGODA_CHECK(!p.xb_ready || p.k == p.k_padded) << "GemmBf16: a ready bf16 x needs k == k_padded";
  Args a = {};
  a.x = p.x;
  a.x_stride = p.x_stride;
  a.x_vec = Aligned16(p.x) && p.x_stride % 4 == 0;
  a.k = static_cast<int>(p.k);
  a.xb = p.xb;
  a.w = p.w;
  a.m = static_cast<int>(p.m);
  a.n = static_cast<int>(p.n);
  a.kp = static_cast<int>(p.k_padded);
  a.chunk = static_cast<int>(p.splits.chunk);
  a.y = p.y;
  a.y_stride = p.y_stride;
  a.accumulate = p.accumulate;
  a.partial = p.partial;
  a.counters = p.counters;
  a.silu_out = p.silu_out;
  a.silu_stride = p.silu_stride;
  a.silu_bf16 = p.silu_out != nullptr ? p.silu_bf16 : nullptr;
  if (p.m <= MediumTile::BM) {
    // The chunks' sums added by each tile's last block; up to kXF32MaxRows rows, x rounded in
    // the kernel too: one launch.
    a.pdl = p.pdl;
    if (splits > 1) {
      PAGODA_CHECK(p.counters != nullptr && (p.n + 63) / 64 <= kGemmMaxCounters)
          << "GemmBf16: " << (p.n + 63) / 64 << " output tiles, " << kGemmMaxCounters << " tile counters";
    }
    auto launch = [&]<class T>() {
      constexpr bool kXF32 = requires { requires T::kXF32; };
      if constexpr (!kXF32) {
        if (!p.xb_ready) ConvertToBf16(p.x, p.x_stride, p.m, p.k, p.k_padded, p.xb, stream, p.pdl);
      }
      if (splits == 1) {
        Launch<T, Mode::kSingle>(a, 1, stream);
      } else {
        Launch<T, Mode::kPartialReduce>(a, splits, stream);
      }
    };
    if (p.m <= kXF32MaxRows) {
      launch.template operator()<TinyTile>();
      return;
    }
    // wgmma (six stages, two blocks an SM) streams best, unless its blocks leave a last wave
    // mostly idle where the mma.sync tiles (three an SM) fill theirs: q|k|v of Llama-3-8B on
    // 132 SMs (384 blocks) is 28.7 us with mma.sync, 34.1 with wgmma.
    const int64_t blocks = (p.n + 63) / 64 * splits;
    const Mode mode = splits == 1 ? Mode::kSingle : Mode::kPartialReduce;
    const double wg = mode == Mode::kSingle ? WaveEfficiency(blocks, ConcurrentBlocks<WgTile64x64, Mode::kSingle>())
                                            : WaveEfficiency(blocks, ConcurrentBlocks<WgTile64x64, Mode::kPartialReduce>());
    const double mma = mode == Mode::kSingle ? WaveEfficiency(blocks, ConcurrentBlocks<MediumTile, Mode::kSingle>())
                                             : WaveEfficiency(blocks, ConcurrentBlocks<MediumTile, Mode::kPartialReduce>());
    // 128 columns a block (four stages, two blocks an SM) where they still fill the SMs' waves:
    // each block reads the x tile for twice the weight columns (gate|up of Llama-3-8B at 64
    // rows: 75.0 -> 70.9 us).
    const int64_t wide_blocks = (p.n + 127) / 128 * splits;
    const double wide = mode == Mode::kSingle
                            ? WaveEfficiency(wide_blocks, ConcurrentBlocks<WgTile64x128, Mode::kSingle>())
                            : WaveEfficiency(wide_blocks, ConcurrentBlocks<WgTile64x128, Mode::kPartialReduce>());
    if (wide >= 0.8 && wide >= wg - 0.02) {
      launch.template operator()<WgTile64x128>();
    } else if (wg < 0.8 && mma > wg) {
      launch.template operator()<MediumTile>();
    } else {
      launch.template operator()<WgTile64x64>();
    }
    return;
  }
  // More rows: x to bf16 once, then CUTLASS's TMA + warp-specialized kernels where the operands'
  // alignment allows (GemmCutlassRows), else our wgmma tiles: each chunk's sums into its partial
  // plane in slabs of at most kGemmPartialMaxRows rows, then ReduceChunks adds the planes in chunk
  // order.
  if (!p.xb_ready) ConvertToBf16(p.x, p.x_stride, p.m, p.k, p.k_padded, p.xb, stream);
  if (GemmCutlassRows(p, stream)) return;
  for (int64_t r0 = 0; r0 < p.m; r0 += splits == 1 ? p.m : kGemmPartialMaxRows) {
    const int64_t rows = splits == 1 ? p.m : std::min(kGemmPartialMaxRows, p.m - r0);
    Args s = a;
    s.xb = a.xb + r0 * a.kp;
    s.m = static_cast<int>(rows);
    s.y = a.y + r0 * a.y_stride;
    if (splits == 1) {
      Launch<WgTile128x256, Mode::kSingle>(s, 1, stream);
      continue;
    }
    Launch<WgTile128x256, Mode::kPartial>(s, splits, stream);
    const int64_t total = rows * p.n;
    ReduceChunksKernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
        p.partial, splits, s.m, s.n, s.y, p.y_stride, p.accumulate);
    PAGODA_CUDA_CHECK_LAUNCH("ReduceChunksKernel");
  }
}

void GemmF32(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t n, int64_t k, float* y,
             int64_t y_stride, bool accumulate, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const dim3 grid(static_cast<unsigned>((n + 63) / 64), static_cast<unsigned>((m + 63) / 64));
  GemmF32Kernel<<<grid, 256, 0, stream>>>(x, x_stride, static_cast<int>(m), w, static_cast<int>(n),
                                          static_cast<int>(k), y, y_stride, accumulate);
  PAGODA_CUDA_CHECK_LAUNCH("GemmF32Kernel");
}

}  // namespace pagoda::cuda
