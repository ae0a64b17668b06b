// The KV row codecs of kv/kv_codec.h on the device, for the formats the CUDA backend stores:
// plain rows (f32, bf16, f16), fp8 (e4m3 / e5m2: d codes, then an f32 scale), int8 (d codes,
// then ceil(d / group) f16 scales), int4 (ceil(d / 2) bytes of nibbles q + 8, value 2i in the
// low nibble, then ceil(d / group) f16 scales) and nvfp4 (ceil(d / 2) bytes of E2M1 nibbles in
// int4's order, then ceil(d / 16) e4m3 scales; x = e2m1 x e4m3 scale x the tensor's f32 scale).
// A row is one (token, KV head); a block holds block_size x
// num_kv_heads rows, token-major, so row (slot, head) starts at (slot * heads + head) * row
// bytes, as in the wide layout.
//
// Quantizing gives the CPU codec's bytes exactly (the same roundings in the same order: scale
// from the absolute maximum, rounded to its storage type first; codes round to nearest even;
// fp8 saturates), so a block means the same on either backend; dequantizing is code x stored
// scale in f32, as on the CPU. Element types: tags for the quantized formats, the element
// type itself for plain rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/kv_types.cuh"
#include "kv/kv_format.h"

namespace pagoda::cuda {

struct Fp8E4M3Row {};
struct Fp8E5M2Row {};
struct Int8Row {};
struct Int4Row {};
struct Nvfp4Row {};
struct Kivi2Row {};  // FlashAttention's kivi2 rows (flash_quant.cuh); the side pool's kernels read them too

template <typename T>
struct KVRowTraits {  // plain rows of T
  static constexpr bool kQuantized = false;
  static constexpr int kCodeBytes = sizeof(T);
};
template <>
struct KVRowTraits<Fp8E4M3Row> {
  static constexpr bool kQuantized = true;
  static constexpr int kCodeBytes = 1;
  static constexpr float kMax = 448.0f;
};
template <>
struct KVRowTraits<Fp8E5M2Row> {
  static constexpr bool kQuantized = true;
  static constexpr int kCodeBytes = 1;
  static constexpr float kMax = 57344.0f;
};
template <>
struct KVRowTraits<Int8Row> {
  static constexpr bool kQuantized = true;
  static constexpr int kCodeBytes = 1;
};
template <>
struct KVRowTraits<Int4Row> {
  static constexpr bool kQuantized = true;
};
template <>
struct KVRowTraits<Nvfp4Row> {
  static constexpr bool kQuantized = true;
};
template <>
struct KVRowTraits<Kivi2Row> {
  static constexpr bool kQuantized = true;
};

// Row (slot, head) of a quantized cache: its index in rows of DeviceKVRowBytes (kv/kv_codec.h's
// KVRowIndex: a block's rows head-major, so a KV head's rows of a block are one run).
__host__ __device__ inline int64_t DeviceKVRowIndex(int64_t slot, int64_t head, int64_t num_heads, int64_t block_size) {
  return (slot / block_size * num_heads + head) * block_size + slot % block_size;
}

// Bytes of one row of `f` for the formats above (kv/kv_codec.cc's KVRowBytes); 0 for others.
__host__ __device__ inline int64_t DeviceKVRowBytes(const KVArrayFormat& f) {
  const int64_t d = f.head_dim;
  switch (f.quant) {
    case KVQuant::kNone: return d * (f.dtype == DType::kF32 ? 4 : 2);
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2: return d + 4;
    case KVQuant::kInt8:
    case KVQuant::kInt4: {
      const int64_t g = f.group < d ? f.group : d;
      return (f.quant == KVQuant::kInt8 ? d : (d + 1) / 2) + 2 * ((d + g - 1) / g);
    }
    case KVQuant::kNvfp4: return (d + 1) / 2 + (d + 15) / 16;
    case KVQuant::kKivi2: {  // values: codes then (f16 scale, f16 min) a group; keys: codes only
      const int64_t g = f.group < d ? f.group : d;
      return (d + 3) / 4 + (f.per_channel ? 0 : 4 * ((d + g - 1) / g));
    }
    default: return 0;
  }
}

__device__ __forceinline__ float Fp8ToFloat(uint8_t c, Fp8E4M3Row) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3)));
}
__device__ __forceinline__ float Fp8ToFloat(uint8_t c, Fp8E5M2Row) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E5M2)));
}
__device__ __forceinline__ uint8_t FloatToFp8(float x, Fp8E4M3Row) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ uint8_t FloatToFp8(float x, Fp8E5M2Row) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2));
}

// An unaligned little-endian f32 / f16 in a row (row bytes need not be multiples of 4).
__device__ __forceinline__ float LoadRowF32(const uint8_t* p) {
  const uint32_t u = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  return __uint_as_float(u);
}
__device__ __forceinline__ float LoadRowF16(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | p[1] << 8)));
}

// Value i of a row (generic, one at a time): head_dim d, int8 group size g.
template <typename T>
__device__ __forceinline__ float DequantizeAt(const uint8_t* row, int64_t i, int64_t, int64_t) {
  return ToFloat(reinterpret_cast<const T*>(row)[i]);
}
template <>
__device__ __forceinline__ float DequantizeAt<Fp8E4M3Row>(const uint8_t* row, int64_t i, int64_t d, int64_t) {
  return __fmul_rn(Fp8ToFloat(row[i], Fp8E4M3Row{}), LoadRowF32(row + d));
}
template <>
__device__ __forceinline__ float DequantizeAt<Fp8E5M2Row>(const uint8_t* row, int64_t i, int64_t d, int64_t) {
  return __fmul_rn(Fp8ToFloat(row[i], Fp8E5M2Row{}), LoadRowF32(row + d));
}
template <>
__device__ __forceinline__ float DequantizeAt<Int8Row>(const uint8_t* row, int64_t i, int64_t d, int64_t g) {
  return __fmul_rn(static_cast<float>(static_cast<int8_t>(row[i])), LoadRowF16(row + d + 2 * (i / g)));
}

// N consecutive values [i, i + N) of a quantized row held in shared memory: the codes are
// 8-byte aligned for N = 8 (the row starts 16-byte aligned and i is a multiple of N), the
// f32 / f16 scales 4- / 2-byte aligned (d a multiple of 4); for int8 the N values share one
// scale (group a multiple of N). HD: head_dim.
template <int N, int HD>
__device__ __forceinline__ void DequantizeRun(const uint8_t* row, int i, int, float* v, Fp8E4M3Row tag) {
  const float s = *reinterpret_cast<const float*>(row + HD);
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = __fmul_rn(Fp8ToFloat(row[i + j], tag), s);
}
template <int N, int HD>
__device__ __forceinline__ void DequantizeRun(const uint8_t* row, int i, int, float* v, Fp8E5M2Row tag) {
  const float s = *reinterpret_cast<const float*>(row + HD);
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = __fmul_rn(Fp8ToFloat(row[i + j], tag), s);
}
template <int N, int HD>
__device__ __forceinline__ void DequantizeRun(const uint8_t* row, int i, int g, float* v, Int8Row) {
  const float s = __half2float(*reinterpret_cast<const __half*>(row + HD + 2 * (i / g)));
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = __fmul_rn(static_cast<float>(static_cast<int8_t>(row[i + j])), s);
}

// core/fp4.h's Fp4E2M1ToF32: E2M1 code c (sign in bit 3) as a float.
__device__ __forceinline__ float Fp4E2M1ToFloat(uint32_t c) {
  const float mag = (c & 7u) < 4u ? 0.5f * static_cast<float>(c & 7u)
                                  : static_cast<float>(((c & 1u) + 2u) << ((c & 7u) / 2u - 1u)) * 0.5f;
  return (c & 8u) ? -mag : mag;
}

// What DequantizeBlockValue needs of a KVArrayFormat, with the row layout worked out once (on
// the host: no 64-bit divisions a value).
struct BlockValueFormat {
  KVQuant quant = KVQuant::kNone;
  bool per_channel = false;
  int d = 0, group = 0, row_bytes = 0, num_heads = 0, block_size = 0;
  float tensor_scale = 1.0f;  // nvfp4's per-tensor scale (1: none)
};
inline BlockValueFormat MakeBlockValueFormat(const KVArrayFormat& f) {
  BlockValueFormat b;
  b.quant = f.quant;
  b.per_channel = f.per_channel;
  b.d = static_cast<int>(f.head_dim);
  b.group = static_cast<int>(f.group < f.head_dim ? f.group : f.head_dim);
  b.row_bytes = static_cast<int>(DeviceKVRowBytes(f));
  b.num_heads = static_cast<int>(f.num_heads);
  b.block_size = static_cast<int>(f.block_size);
  b.tensor_scale = f.tensor_scale > 0.0f ? f.tensor_scale : 1.0f;
  return b;
}

// Value i of (offset, head) in a block of any format the backend stores, as kv/kv_codec.cc's
// DequantizeKVRow computes it (code x stored scale; kivi2: min + code x scale, per token for
// values and per (head, channel) over the block for keys). One value at a time: the side pool's
// attention kernels (paged_attention_wide.cu) read codes where they do not read wide copies.
// REQUIRES: f.quant != kNone; no heavy rows.
__device__ inline float DequantizeBlockValue(const BlockValueFormat& f, const uint8_t* block, int offset, int head,
                                             int i) {
  const int d = f.d, g = f.group;
  if (f.per_channel) {  // kivi2 keys: [heads x d x (scale, min)], then the heads' rows of codes
    const uint8_t* meta = block + (head * d + i) * 4;
    const uint8_t* row = block + f.num_heads * d * 4 + (head * f.block_size + offset) * f.row_bytes;
    const int q = (row[i / 4] >> (2 * (i % 4))) & 3;
    return __fadd_rn(LoadRowF16(meta + 2), __fmul_rn(static_cast<float>(q), LoadRowF16(meta)));
  }
  const uint8_t* row = block + (head * f.block_size + offset) * f.row_bytes;  // head-major rows
  switch (f.quant) {
    case KVQuant::kFp8E4M3: return DequantizeAt<Fp8E4M3Row>(row, i, d, g);
    case KVQuant::kFp8E5M2: return DequantizeAt<Fp8E5M2Row>(row, i, d, g);
    case KVQuant::kInt8: return __fmul_rn(static_cast<float>(static_cast<int8_t>(row[i])), LoadRowF16(row + d + 2 * (i / g)));
    case KVQuant::kInt4: {
      const int q = ((row[i / 2] >> (4 * (i % 2))) & 15) - 8;
      return __fmul_rn(static_cast<float>(q), LoadRowF16(row + (d + 1) / 2 + 2 * (i / g)));
    }
    case KVQuant::kNvfp4: {
      const float s = __fmul_rn(Fp8ToFloat(row[(d + 1) / 2 + i / 16], Fp8E4M3Row{}), f.tensor_scale);
      return __fmul_rn(Fp4E2M1ToFloat((row[i / 2] >> (4 * (i % 2))) & 15u), s);
    }
    case KVQuant::kKivi2: {
      const uint8_t* meta = row + (d + 3) / 4 + 4 * (i / g);
      const int q = (row[i / 4] >> (2 * (i % 4))) & 3;
      return __fadd_rn(LoadRowF16(meta + 2), __fmul_rn(static_cast<float>(q), LoadRowF16(meta)));
    }
    default: return 0.0f;
  }
}

// ---- quantizing one (token, head) row, by a thread block ----
// Every thread of the block calls these (they synchronize); x [d] f32, row: the cache row.

constexpr int kMaxKVQuantDim = 512;  // the largest head_dim quantized on the device


// The absolute maximum as ordered int bits (non-negative floats order as their bits); NaN is
// skipped, as std::max skips it on the CPU.
__device__ __forceinline__ void KVMaxAbs(int* slot, float x) {
  const float a = fabsf(x);
  if (!isnan(a)) atomicMax(slot, __float_as_int(a));
}

// One (token, head) row x [d] into `row`, by the block's threads (kv/kv_codec.cc's QuantizeFp8).
template <typename Tag>
__device__ inline void QuantizeFp8Row(const float* x, uint8_t* row, int d, float tensor_scale) {
  __shared__ int amax_bits;
  if (threadIdx.x == 0) amax_bits = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) KVMaxAbs(&amax_bits, x[i]);
  __syncthreads();
  constexpr float kMax = KVRowTraits<Tag>::kMax;
  float scale = tensor_scale > 0.0f ? tensor_scale : __fdiv_rn(__int_as_float(amax_bits), kMax);
  if (!(scale > 0.0f) || isinf(scale)) scale = scale > 0.0f ? __fdiv_rn(3.0e38f, kMax) : 1.0f;
  const float inv = __fdiv_rn(1.0f, scale);
  for (int i = threadIdx.x; i < d; i += blockDim.x) row[i] = FloatToFp8(__fmul_rn(x[i], inv), Tag{});
  if (threadIdx.x < 4) row[d + threadIdx.x] = static_cast<uint8_t>(__float_as_uint(scale) >> (8 * threadIdx.x));
}

// kv/kv_codec.cc's QuantizeInt for int8 (kInt4 false) and int4: symmetric codes, one f16 scale
// per group of g values (amax / 127 or / 7). REQUIRES: d even (the scales 2-byte aligned).
// The integer quantizers' shared group maxima and scales (one pair a kernel, whichever widths
// it quantizes).
__device__ inline int* IntQuantAmaxBits() {
  __shared__ int amax_bits[kMaxKVQuantDim];
  return amax_bits;
}
__device__ inline float* IntQuantScales() {
  __shared__ float scales[kMaxKVQuantDim];
  return scales;
}

template <bool kInt4 = false>
__device__ inline void QuantizeIntRow(const float* x, uint8_t* row, int d, int g) {
  constexpr float kQMax = kInt4 ? 7.0f : 127.0f;
  const int code_bytes = kInt4 ? (d + 1) / 2 : d;
  int* amax_bits = IntQuantAmaxBits();
  float* scales = IntQuantScales();
  const int groups = (d + g - 1) / g;
  for (int j = threadIdx.x; j < groups; j += blockDim.x) amax_bits[j] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < d; i += blockDim.x) KVMaxAbs(&amax_bits[i / g], x[i]);
  __syncthreads();
  for (int j = threadIdx.x; j < groups; j += blockDim.x) {
    const __half h = __float2half_rn(fminf(__fdiv_rn(__int_as_float(amax_bits[j]), kQMax), 65504.0f));
    // One 16-bit store (rows and head dims are even), as the f16 cache's write does: two byte
    // stores of the halves came out with a zero low byte on the H200 (sm_90a, CUDA 13).
    *reinterpret_cast<unsigned short*>(row + code_bytes + 2 * j) = __half_as_ushort(h);
    scales[j] = __half2float(h);
  }
  __syncthreads();
  auto code = [&](int i) {
    const float s = scales[i / g];
    const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
    return static_cast<int>(fminf(fmaxf(rintf(__fmul_rn(x[i], inv)), -kQMax), kQMax));
  };
  if constexpr (kInt4) {
    for (int b = threadIdx.x; b < code_bytes; b += blockDim.x) {  // values 2b (low) and 2b + 1
      const int lo = code(2 * b) + 8, hi = 2 * b + 1 < d ? code(2 * b + 1) + 8 : 0;
      row[b] = static_cast<uint8_t>(lo | hi << 4);
    }
  } else {
    for (int i = threadIdx.x; i < d; i += blockDim.x) row[i] = static_cast<uint8_t>(static_cast<int8_t>(code(i)));
  }
}
__device__ inline void QuantizeInt8Row(const float* x, uint8_t* row, int d, int g) { QuantizeIntRow<false>(x, row, d, g); }
__device__ inline void QuantizeInt4Row(const float* x, uint8_t* row, int d, int g) { QuantizeIntRow<true>(x, row, d, g); }

// kv/kv_codec.cc's QuantizeKivi2Row (kivi2 values): per group of g values, scale (max - min) / 3
// and min, both stored as f16 (clamped at 65504) first, then codes round((x - min) / scale) in
// 0..3, value i in bits 2(i % 4) of byte i / 4. REQUIRES: d % 8 == 0 (the f16 pairs 2-byte
// aligned).
__device__ inline void QuantizeKivi2Row(const float* x, uint8_t* row, int d, int g) {
  float* scales = IntQuantScales();
  __shared__ float mins[kMaxKVQuantDim];
  const int groups = (d + g - 1) / g;
  uint8_t* meta = row + d / 4;
  for (int j = threadIdx.x; j < groups; j += blockDim.x) {
    float lo = INFINITY, hi = -INFINITY;
    for (int i = j * g; i < d && i < (j + 1) * g; ++i) {
      lo = fminf(lo, x[i]);
      hi = fmaxf(hi, x[i]);
    }
    const __half s = __float2half_rn(fminf(__fdiv_rn(__fsub_rn(hi, lo), 3.0f), 65504.0f));
    const __half m = __float2half_rn(fminf(lo, 65504.0f));
    *reinterpret_cast<unsigned short*>(meta + 4 * j) = __half_as_ushort(s);
    *reinterpret_cast<unsigned short*>(meta + 4 * j + 2) = __half_as_ushort(m);
    scales[j] = __half2float(s);
    mins[j] = __half2float(m);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < d / 4; b += blockDim.x) {
    uint32_t byte = 0;
    for (int k = 0; k < 4; ++k) {
      const int i = 4 * b + k, j = i / g;
      const float inv = scales[j] > 0.0f ? __fdiv_rn(1.0f, scales[j]) : 0.0f;
      const float q = fminf(fmaxf(rintf(__fmul_rn(__fsub_rn(x[i], mins[j]), inv)), 0.0f), 3.0f);
      byte |= static_cast<uint32_t>(q) << (2 * k);
    }
    row[b] = static_cast<uint8_t>(byte);
  }
}

// core/fp4.h's F32ToFp4E2M1: round to nearest, ties to the even code, saturating at 6; the sign
// in bit 3 (so -0 for negative values that round to 0), NaN to 0.
__device__ __forceinline__ uint32_t FloatToFp4E2M1(float x) {
  if (isnan(x)) return 0;
  const uint32_t sign = signbit(x) ? 8u : 0u;
  const float a = fabsf(x);
  // The midpoints between codes c and c + 1; an even code keeps its upper midpoint.
  const uint32_t c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return sign | c;
}

// kv/kv_codec.cc's QuantizeNvfp4: a group of 16 values takes the e4m3 scale amax / (6 x tensor
// scale) (0: 1), its codes x / (e4m3 scale x tensor scale) in E2M1. Groups are whole 16-value
// runs; a thread quantizes a group at a time. REQUIRES: d % 16 == 0.
__device__ inline void QuantizeNvfp4Row(const float* x, uint8_t* row, int d, float tensor_scale) {
  const float global = tensor_scale > 0.0f ? tensor_scale : 1.0f;
  for (int j = threadIdx.x; j < d / 16; j += blockDim.x) {
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const float a = fabsf(x[16 * j + i]);
      if (a > amax) amax = a;  // NaN skipped, as std::max(m, NaN) keeps m
    }
    const uint8_t code = FloatToFp8(__fdiv_rn(amax, __fmul_rn(6.0f, global)), Fp8E4M3Row{});
    row[d / 2 + j] = code;
    const float s = __fmul_rn(Fp8ToFloat(code, Fp8E4M3Row{}), global);
    const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
    for (int b = 0; b < 8; ++b) {
      const uint32_t lo = FloatToFp4E2M1(__fmul_rn(x[16 * j + 2 * b], inv));
      const uint32_t hi = FloatToFp4E2M1(__fmul_rn(x[16 * j + 2 * b + 1], inv));
      row[8 * j + b] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace pagoda::cuda
