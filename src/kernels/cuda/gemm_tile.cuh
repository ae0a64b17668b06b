// The bf16 GEMM's pieces shared by its two kernel families (gemm_mma.cuh, gemm_wgmma.cuh;
// launched by gemm.cu): the launch arguments, how a block runs the k chunks, the swizzled
// stages and their cp.async loads, and the epilogue (the output or partial plane, the fused
// SiLU, the last block's in-order sum of the chunks).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/silu.cuh"

namespace pagoda::cuda::gemm {

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

}  // namespace pagoda::cuda::gemm
