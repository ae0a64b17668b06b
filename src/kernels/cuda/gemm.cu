#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kBK = static_cast<int>(kGemmKTile);  // k values per tile: 128 bytes of bf16 a row

// A tile row is 64 bf16 = 8 chunks of 16 bytes; chunk c of row r sits at chunk c ^ (r % 8), so
// the 8 rows an ldmatrix reads at one logical chunk land in 8 different bank groups.
__device__ __forceinline__ uint32_t Swizzle(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

struct Args {
  const uint16_t* xb;  // [m, kp] bf16
  const uint16_t* w;   // [n, kp] bf16
  int m, n, kp;
  int chunk;  // k values per chunk (multiple of kBK)
  float* y;
  int64_t y_stride;
  bool accumulate;
  float* partial;  // [splits, m, n]
};

// How a block runs the k chunks.
enum class Mode {
  kSingle,   // one chunk: the block's sum is the result
  kInBlock,  // the block walks every chunk, adding chunk sums in order (large m)
  kPartial,  // block z sums chunk z into `partial`; ReduceChunks adds them in order (small m)
};

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
  static constexpr int MI = WTM / 16, NI = WTN / 8;
  static constexpr int kStageBytes = (BM + BN) * kBK * 2;
  static constexpr int kPipelineBytes = STAGES * kStageBytes;
  // kInBlock keeps the running total of the chunk sums in shared memory after the pipeline
  // (registers hold only the current chunk's accumulators): MI * NI * 4 floats per thread.
  static constexpr int kTotalBytes = MI * NI * 4 * kThreads * 4;
  static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0, "warp tile");
};

using SmallTile = Tile<16, 64, 1, 4, 4>;     // m <= 16 (decode)
using MediumTile = Tile<64, 64, 2, 2, 4>;    // m <= 64
using LargeTile = Tile<128, 128, 2, 4, 3>;   // prefill

template <class T, Mode kMode>
constexpr int SmemBytes() {
  return T::kPipelineBytes + (kMode == Mode::kInBlock ? T::kTotalBytes : 0);
}

template <class T, Mode kMode>
__global__ void __launch_bounds__(T::kThreads, kMode == Mode::kInBlock ? 1 : 2) GemmBf16Kernel(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
  const int m0 = blockIdx.y * T::BM, n0 = blockIdx.x * T::BN;
  int k_begin = 0, k_end = a.kp;
  if constexpr (kMode == Mode::kPartial) {
    k_begin = blockIdx.z * a.chunk;
    k_end = min(a.kp, k_begin + a.chunk);
  }
  const int num_tiles = (k_end - k_begin) / kBK;
  const int tiles_per_chunk = a.chunk / kBK;

  auto load_tile = [&](int stage, int t) {
    const int k0 = k_begin + t * kBK;
    uint8_t* sa = smem + stage * T::kStageBytes;
    uint8_t* sb = sa + T::BM * kBK * 2;
#pragma unroll
    for (int i = tid; i < T::BM * 8; i += T::kThreads) {
      const int r = i >> 3, c = i & 7;
      const bool ok = m0 + r < a.m;
      const uint16_t* src = a.xb + static_cast<int64_t>(ok ? m0 + r : 0) * a.kp + k0 + c * 8;
      CpAsync16(SmemAddr(sa) + Swizzle(r, c), src, ok);
    }
#pragma unroll
    for (int i = tid; i < T::BN * 8; i += T::kThreads) {
      const int r = i >> 3, c = i & 7;
      const bool ok = n0 + r < a.n;
      const uint16_t* src = a.w + static_cast<int64_t>(ok ? n0 + r : 0) * a.kp + k0 + c * 8;
      CpAsync16(SmemAddr(sb) + Swizzle(r, c), src, ok);
    }
  };

  float acc[T::MI][T::NI][4];
  // kInBlock: element (i, j, e) of this thread's total at total_s[((i * NI + j) * 4 + e) * kThreads + tid].
  float* total_s = reinterpret_cast<float*>(smem + T::kPipelineBytes);
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < num_tiles) load_tile(s, s);
    CpAsyncCommit();
  }

  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<T::STAGES - 2>();
    __syncthreads();
    {
      const int next = t + T::STAGES - 1;
      if (next < num_tiles) load_tile(next % T::STAGES, next);
      CpAsyncCommit();
    }
    const uint32_t sa = SmemAddr(smem + (t % T::STAGES) * T::kStageBytes);
    const uint32_t sb = sa + T::BM * kBK * 2;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[T::MI][4], bfr[T::NI][2];
#pragma unroll
      for (int i = 0; i < T::MI; ++i) {
        const int r = wm * T::WTM + i * 16 + (lane & 15);
        LdMatrixX4(sa + Swizzle(r, kk * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
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
    if constexpr (kMode == Mode::kInBlock) {
      // End of a chunk: fold its sum into the total in chunk order, restart from zero.
      if ((t + 1) % tiles_per_chunk == 0 || t + 1 == num_tiles) {
        const bool first = t + 1 <= tiles_per_chunk;
#pragma unroll
        for (int i = 0; i < T::MI; ++i)
#pragma unroll
          for (int j = 0; j < T::NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float& total = total_s[((i * T::NI + j) * 4 + e) * T::kThreads + tid];
              total = first ? acc[i][j][e] : __fadd_rn(total, acc[i][j][e]);
              acc[i][j][e] = 0.0f;
            }
      }
    }
  }
  CpAsyncWait<0>();

  // Epilogue: c0,c1 at (row lane/4, cols 2*(lane%4) + {0,1}); c2,c3 eight rows down.
#pragma unroll
  for (int i = 0; i < T::MI; ++i) {
#pragma unroll
    for (int j = 0; j < T::NI; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm * T::WTM + i * 16 + (lane >> 2) + (e >> 1) * 8;
        const int col = n0 + wn * T::WTN + j * 8 + (lane & 3) * 2 + (e & 1);
        if (row >= a.m || col >= a.n) continue;
        float v;
        if constexpr (kMode == Mode::kInBlock) {
          v = total_s[((i * T::NI + j) * 4 + e) * T::kThreads + tid];
        } else {
          v = acc[i][j][e];
        }
        if constexpr (kMode == Mode::kPartial) {
          a.partial[(static_cast<int64_t>(blockIdx.z) * a.m + row) * a.n + col] = v;
        } else {
          float* out = a.y + row * a.y_stride + col;
          *out = a.accumulate ? __fadd_rn(*out, v) : v;
        }
      }
    }
  }
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

template <class T, Mode kMode>
void Launch(const Args& a, int splits, cudaStream_t stream) {
  static bool configured = false;  // one attribute call per instantiation
  if (!configured) {
    PAGODA_CUDA_CHECK(cudaFuncSetAttribute(GemmBf16Kernel<T, kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           SmemBytes<T, kMode>()));
    configured = true;
  }
  const dim3 grid((a.n + T::BN - 1) / T::BN, (a.m + T::BM - 1) / T::BM, kMode == Mode::kPartial ? splits : 1);
  GemmBf16Kernel<T, kMode><<<grid, T::kThreads, SmemBytes<T, kMode>(), stream>>>(a);
  PAGODA_CUDA_CHECK_LAUNCH("GemmBf16Kernel");
}

template <class T>
void LaunchFor(const Args& a, int splits, bool partial, cudaStream_t stream) {
  if (splits == 1) {
    Launch<T, Mode::kSingle>(a, 1, stream);
  } else if (partial) {
    Launch<T, Mode::kPartial>(a, splits, stream);
  } else {
    Launch<T, Mode::kInBlock>(a, splits, stream);
  }
}

// Small m streams the weight: chunks go to separate blocks when the tiles alone are few.
constexpr int64_t kPartialMaxRows = 64;

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

GemmSplits GemmSplitsFor(int64_t n, int64_t k_padded) {
  // Enough (tile, chunk) blocks for every SM of a large GPU at m = 1 (64-wide tiles), chunks
  // of at least 512 values, at most 4 chunks (the partial sums' traffic grows with them).
  constexpr int64_t kTargetBlocks = 256, kMinChunk = 512, kMaxSplits = 4;
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
  return (s.splits > 1 && m <= kPartialMaxRows) ? s.splits * m * n : 0;
}

void ConvertToBf16(const float* x, int64_t x_stride, int64_t rows, int64_t cols, int64_t cols_padded, uint16_t* out,
                   cudaStream_t stream) {
  const int64_t total = rows * cols_padded;
  if (total == 0) return;
  ConvertToBf16Kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      x, x_stride, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(cols_padded),
      reinterpret_cast<__nv_bfloat16*>(out));
  PAGODA_CUDA_CHECK_LAUNCH("ConvertToBf16Kernel");
}

void GemmBf16(const GemmBf16Params& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return;
  PAGODA_CHECK(p.k_padded % kGemmKTile == 0 && p.k_padded >= p.k && p.splits.chunk % kGemmKTile == 0)
      << "GemmBf16: bad padding (k " << p.k << ", padded " << p.k_padded << ", chunk " << p.splits.chunk << ")";
  ConvertToBf16(p.x, p.x_stride, p.m, p.k, p.k_padded, p.xb, stream);
  Args a;
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
  const int splits = p.splits.splits;
  const bool partial = splits > 1 && p.m <= kPartialMaxRows;
  PAGODA_CHECK(!partial || p.partial != nullptr) << "GemmBf16: no scratch for the partial sums";
  if (p.m <= SmallTile::BM) {
    LaunchFor<SmallTile>(a, splits, partial, stream);
  } else if (p.m <= MediumTile::BM) {
    LaunchFor<MediumTile>(a, splits, partial, stream);
  } else {
    LaunchFor<LargeTile>(a, splits, partial, stream);
  }
  if (partial) {
    const int64_t total = p.m * p.n;
    ReduceChunksKernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
        p.partial, splits, a.m, a.n, p.y, p.y_stride, p.accumulate);
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
