// Hopper GEMMs for many rows from CUTLASS (sm90 TMA + warp-specialized wgmma kernels), the
// tensor-core rate that prefill needs.
//
//   d [m, n] f32 = a [m, k] bf16 * b [n, k]^T bf16 (+ c [m, n] f32 when add_c)
//
// Every output is summed the way GemmBf16's own kernels sum it: k-tiles of 64 in order, four
// k-steps of 16 each, into a zero-started f32 accumulator (one wgmma chain per tile, no split-K),
// then `acc + c` rounded once. The tile shape (chosen here by m and n) only decides which block
// computes an output, so a row's bits do not depend on m (tests/cuda/cuda_gemm_test.cc checks
// them against the m <= 64 kernels). Weights whose k is cut into chunks: split-K with the chunks
// as splits (the stream-K scheduler's split-K mode, partial sums added in k order), or one call
// per chunk with c the previous chunks' sum where the chunks are not all equal.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pagoda::cuda {

struct GemmCutlassParams {
  const uint16_t* a = nullptr;  // bf16 bits, row stride lda
  int64_t lda = 0;
  const uint16_t* b = nullptr;  // bf16 bits [n, k], row stride ldb
  int64_t ldb = 0;
  int64_t m = 0, n = 0, k = 0;
  const float* c = nullptr;  // read when add_c (may equal d: each tile reads its c before it writes d)
  int64_t ldc = 0;
  bool add_c = false;
  float* d = nullptr;
  int64_t ldd = 0;
  // Split-K into `splits` equal runs of k (k a multiple of 64 x splits), summed in k order by
  // the kernel's deterministic reduction through `workspace` (GemmCutlassWorkspace bytes).
  int splits = 1;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // One product of a chain (a k chunk of a chunked weight, not split-K): the ping-pong kernel.
  bool chained = false;
};

// Whether the kernels take these operands: TMA needs 16-byte aligned rows and bases.
bool GemmCutlassSupported(const GemmCutlassParams& p);
size_t GemmCutlassWorkspace(const GemmCutlassParams& p);
void GemmCutlass(const GemmCutlassParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
