// Tensor-core and asynchronous-copy building blocks shared by the CUDA kernels (sm_80+ PTX:
// cp.async, ldmatrix, mma.sync m16n8k16), each a one-instruction wrapper.
//
// mma.sync m16n8k16 fragments (g = lane / 4, q = lane % 4), as the kernels use them:
//   A (16x16, row-major): a0 = (row g, k 2q..2q+1), a1 = (row g+8, same k), a2 = (row g,
//     k 2q+8..2q+9), a3 = (row g+8, k 2q+8..2q+9), two 16-bit values per register;
//   B (16x8, column-major): b0 = (k 2q..2q+1, column g), b1 = (k 2q+8..2q+9, column g);
//   C/D (16x8 f32): c0, c1 = (row g, columns 2q, 2q+1), c2, c3 = (row g+8, same columns).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::cuda {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; `valid` false fills zeros and reads nothing.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid = true) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) { CpAsync16(SmemAddr(dst), src); }
// 16 bytes to shared of which the first `bytes` (0..16) come from `src`, the rest zeros.
__device__ __forceinline__ void CpAsync16Bytes(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 4 bytes global -> shared, or 4 zero bytes when !valid (rows whose 16-byte chunks are unaligned).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 4 bytes global -> shared, asynchronously (rows that are not multiples of 16 bytes).
__device__ __forceinline__ void CpAsync4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(dst)), "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 matrices of 16-bit values; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// The same, each matrix transposed (a row-major [k][n] tile as B fragments).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// c += a b for one m16n8k16 tile with T operands (bf16 or f16) and f32 accumulators.
template <typename T>
__device__ __forceinline__ void Mma(float* c, const uint32_t* a, const uint32_t* b);
template <>
__device__ __forceinline__ void Mma<__nv_bfloat16>(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void Mma<__half>(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Mma for a warp whose rows 8-15 are padding (kTop): c holds rows 0-7 only (c[0], c[1]); rows
// 8-15 start from zero and their results are dropped, so they take no registers between
// products. Rows are independent in the product, so c[0] and c[1] get the bits Mma gives them.
template <typename T, bool kTop>
__device__ __forceinline__ void MmaRows(float* c, const uint32_t* a, const uint32_t* b) {
  if constexpr (!kTop) {
    Mma<T>(c, a, b);
  } else {
    float d2, d3;
    if constexpr (std::is_same_v<T, __half>) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%10,%10};\n"
          : "+f"(c[0]), "+f"(c[1]), "=f"(d2), "=f"(d3)
          : "r"(a[0]), "r"(0u), "r"(a[2]), "r"(0u), "r"(b[0]), "r"(b[1]), "f"(0.0f));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%10,%10};\n"
          : "+f"(c[0]), "+f"(c[1]), "=f"(d2), "=f"(d3)
          : "r"(a[0]), "r"(0u), "r"(a[2]), "r"(0u), "r"(b[0]), "r"(b[1]), "f"(0.0f));
    }
  }
}

// Two floats rounded to nearest as one register of two T (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t PackPair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t PackPair<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x by the special-function unit (ex2.approx: one instruction, the same bits wherever it
// runs; 2^-inf = +0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace pagoda::cuda
