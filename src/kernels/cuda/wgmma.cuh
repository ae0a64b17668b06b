// Hopper warpgroup matrix products (wgmma, sm_90a): one-instruction wrappers and the shared
// memory descriptor of a K-major bf16 tile in the 128-byte swizzle (kernels/cuda/gemm_tile.cuh).
//
// A warpgroup (4 warps, 128 threads) computes D[64, N] (+)= A[64, 16] B[16, N]^T with A and B
// read from shared memory through descriptors. The f32 accumulators d[N / 2] of a thread are in
// the mma.sync C layout per warp: warp w of the group holds rows 16w..16w+15, d[4j + e] =
// (row 16w + lane / 4 + 8 (e / 2), column 8j + 2 (lane % 4) + e % 2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pagoda::cuda {

// A tile whose rows are 128 bytes (64 bf16 of k), 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) (kernels/cuda/gemm_tile.cuh's Swizzle), 8-row groups 1024 bytes apart; `addr` is the
// shared address of the tile (1024-byte aligned) plus 32 bytes per k-step of 16 values.
__device__ __forceinline__ uint64_t SwizzledTileDescriptor(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);  // start address
  d |= static_cast<uint64_t>(1) << 16;                  // leading byte offset (unused: swizzled K-major)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;          // stride byte offset: one 8-row group
  d |= static_cast<uint64_t>(1) << 62;                  // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by ordinary stores or cp.async, made visible to wgmma's reads.
__device__ __forceinline__ void FenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The products, as inline PTX. A thread holds N / 2 f32 accumulators of an m64nNk16 product:
// PAGODA_WGMMA_D<N / 2>(d) lists them as operands, PAGODA_WGMMA_R<N / 2> names them in the
// instruction (%0 ...), so the operands after them start at N / 2.
#define PAGODA_WGMMA_D8(d, o)                                                                                  \
  "+f"((d)[(o) + 0]), "+f"((d)[(o) + 1]), "+f"((d)[(o) + 2]), "+f"((d)[(o) + 3]), "+f"((d)[(o) + 4]), \
      "+f"((d)[(o) + 5]), "+f"((d)[(o) + 6]), "+f"((d)[(o) + 7])
#define PAGODA_WGMMA_D32(d, o) \
  PAGODA_WGMMA_D8(d, (o)), PAGODA_WGMMA_D8(d, (o) + 8), PAGODA_WGMMA_D8(d, (o) + 16), PAGODA_WGMMA_D8(d, (o) + 24)
#define PAGODA_WGMMA_D64(d, o) PAGODA_WGMMA_D32(d, (o)), PAGODA_WGMMA_D32(d, (o) + 32)
#define PAGODA_WGMMA_D128(d, o) PAGODA_WGMMA_D64(d, (o)), PAGODA_WGMMA_D64(d, (o) + 64)
#define PAGODA_WGMMA_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PAGODA_WGMMA_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define PAGODA_WGMMA_R128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// WgmmaSS<N, T>: d (+)= A B^T for one k-step of 16 (scale_d 0: d = A B^T), A (64 x 16) and B
// (N x 16) K-major 16-bit tiles read through descriptors, T __nv_bfloat16 or __half.
// WgmmaRSTransB<N, T>: d (+)= A B with A (64 x 16) from registers in the mma.sync A layout per
// warp (a[0..3] as m16n8k16's) and B (16 x N) read MN-major (N contiguous: a tile stored
// [k][n], e.g. V's rows for P V) (scale_d 0: d = A B).
template <int N, typename T>
__device__ __forceinline__ void WgmmaSS(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d);
template <int N, typename T>
__device__ __forceinline__ void WgmmaRSTransB(float* d, const uint32_t (&a)[4], uint64_t desc_b, int scale_d);
// WgmmaRS<N, T>: d (+)= A B^T with A (64 x 16) from registers (mma.sync's A layout per warp) and
// B (N x 16) K-major through a descriptor, as WgmmaSS's B (scale_d 0: d = A B^T).
template <int N, typename T>
__device__ __forceinline__ void WgmmaRS(float* d, const uint32_t (&a)[4], uint64_t desc_b, int scale_d);

// N, T, T's PTX name, the accumulators' count a thread and the next operand's number (as text).
#define PAGODA_WGMMA_SS(N, T, TYPE, R, NEXT, NEXT1, NEXT2)                                                        \
  template <>                                                                                                      \
  __device__ __forceinline__ void WgmmaSS<N, T>(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" NEXT2 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N         \
                 "k16.f32." TYPE "." TYPE " " PAGODA_WGMMA_R##R ", %" NEXT ", %" NEXT1 ", p, 1, 1, 0, 0;\n}\n"    \
                 : PAGODA_WGMMA_D##R(d, 0)                                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                        \
  }
// The register-A products: FN (WgmmaRS, B K-major, or WgmmaRSTransB, B MN-major: TRANS 0 / 1).
#define PAGODA_WGMMA_RS(FN, TRANS, N, T, TYPE, R, A0, A1, A2, A3, B, SD)                                           \
  template <>                                                                                                      \
  __device__ __forceinline__ void FN<N, T>(float* d, const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SD ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N            \
                 "k16.f32." TYPE "." TYPE " " PAGODA_WGMMA_R##R ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B       \
                 ", p, 1, 1, " #TRANS ";\n}\n"                                                                     \
                 : PAGODA_WGMMA_D##R(d, 0)                                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));                         \
  }
PAGODA_WGMMA_RS(WgmmaRS, 0, 64, __nv_bfloat16, "bf16", 32, "32", "33", "34", "35", "36", "37")
PAGODA_WGMMA_RS(WgmmaRS, 0, 64, __half, "f16", 32, "32", "33", "34", "35", "36", "37")
PAGODA_WGMMA_SS(64, __nv_bfloat16, "bf16", 32, "32", "33", "34")
PAGODA_WGMMA_SS(128, __nv_bfloat16, "bf16", 64, "64", "65", "66")
PAGODA_WGMMA_SS(256, __nv_bfloat16, "bf16", 128, "128", "129", "130")
PAGODA_WGMMA_SS(64, __half, "f16", 32, "32", "33", "34")
PAGODA_WGMMA_SS(128, __half, "f16", 64, "64", "65", "66")
PAGODA_WGMMA_RS(WgmmaRSTransB, 1, 64, __nv_bfloat16, "bf16", 32, "32", "33", "34", "35", "36", "37")
PAGODA_WGMMA_RS(WgmmaRSTransB, 1, 128, __nv_bfloat16, "bf16", 64, "64", "65", "66", "67", "68", "69")
PAGODA_WGMMA_RS(WgmmaRSTransB, 1, 64, __half, "f16", 32, "32", "33", "34", "35", "36", "37")
PAGODA_WGMMA_RS(WgmmaRSTransB, 1, 128, __half, "f16", 64, "64", "65", "66", "67", "68", "69")
#undef PAGODA_WGMMA_SS
#undef PAGODA_WGMMA_RS

// The GEMMs' bf16 product.
template <int N>
__device__ __forceinline__ void Wgmma(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  WgmmaSS<N, __nv_bfloat16>(d, desc_a, desc_b, scale_d);
}

// An MN-major 16-bit tile in the 128-byte swizzle: rows of 128 bytes (64 values of n) per k
// index, chunk c of row r at chunk c ^ (r % 8), 8-row groups 1024 bytes apart (SBO) and
// successive 64-value blocks of n `lbo_bytes` apart (LBO); `addr` 1024-byte aligned plus 2048
// bytes per k-step of 16.
__device__ __forceinline__ uint64_t SwizzledTileDescriptorMN(uint32_t addr, uint32_t lbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

}  // namespace pagoda::cuda
