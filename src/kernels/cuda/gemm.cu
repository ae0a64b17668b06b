#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/cuda/convert_bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemm_cutlass.h"
#include "kernels/cuda/gemm_gemv.cuh"
#include "kernels/cuda/gemm_mma.cuh"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "kernels/cuda/smem_limit.cuh"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/pdl.cuh"

namespace pagoda::cuda {
namespace {

using namespace gemm;  // the shared tile pieces and both kernel families

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
  static uint32_t devices_done = 0;
  AllowSmem(kernel, smem, &devices_done);
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

// Up to 8 rows of a weight cut into k chunks: GemvChunksKernel (a warp per chunk, the chunks
// added in the block). PAGODA_GEMV=0 runs the mma.sync kernel's (tile, chunk) blocks instead, the
// same bits (a diagnostic for timing the two in one run).
const bool gemv_chunks = EnvSwitch("PAGODA_GEMV", true);

void LaunchGemvChunks(const Args& a, int splits, cudaStream_t stream) {
  static uint32_t devices_done = 0;
  AllowSmem(GemvChunksKernel, GemvTile::SmemBytes(GemvTile::kXRows, kMaxChunks), &devices_done);
  LaunchDependent(GemvChunksKernel, dim3((a.n + GemvTile::BN - 1) / GemvTile::BN), dim3(32 * splits),
                  static_cast<size_t>(GemvTile::SmemBytes(a.m, splits)), stream, a.pdl, a);
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

bool GemmFusesSilu(const GemmBf16Params& p) {
  static_assert(kGemmFusedSiluMaxRows == MediumTile::BM, "the fused SiLU runs in the 64-row kernels' epilogue");
  return p.m <= kGemmFusedSiluMaxRows && p.splits.splits == 1 && p.n % 32 == 0 && !p.accumulate;
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
    if (p.m <= kXF32MaxRows && splits > 1 && splits <= kMaxChunks && gemv_chunks) {
      LaunchGemvChunks(a, splits, stream);
      return;
    }
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

}  // namespace pagoda::cuda
