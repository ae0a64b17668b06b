// FlashAttention over quantized KV rows (fp8 e4m3/e5m2, int8, int4): the raw tiles they land in,
// int8 and int4's conversion into bf16 tiles, and fp8's K and V fragments converted in registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/mma.cuh"

namespace pagoda::cuda::flash {

// Quantized caches (fp8 e4m3/e5m2: d codes then an f32 scale; int8: d codes then f16 scales, one
// per group of 8k values dividing d): a row lands raw, as whole 16-byte pieces from the one
// holding its first byte (rows need not start 16-byte aligned: 132 bytes for fp8 at d 128), in
// raw rows of RawGeometry::kRowBytes; the tile's 64 offsets of each row's first byte in its raw
// row follow.
//   int8, int4: the tile is dequantized into bf16 rows (Geometry: code x scale in f32, as the
//         CPU codec dequantizes, rounded to bf16) and the products run as for a bf16 cache;
//   fp8 (Fp8KRegs): K's B fragments are converted from the raw tile in registers (two codes to an
//         exact f16 pair a register, Q rounded to f16; FlashAttention's f16 product) and each
//         key's scale multiplies its scores; V's B fragments too (AddRawFp8Values: codes to f16,
//         exact), each key's scale (times the tile's power of two) multiplying P before P is
//         rounded to f16. No bf16 tile: the raw K and V buffers are all the shared memory a
//         warp needs.
template <typename Tag>
struct Fp8KRegs {};
template <typename KV>
struct KVKind {
  using Row = KV;  // the row format (or element type)
  static constexpr bool kKRegs = false;
};
template <typename Tag>
struct KVKind<Fp8KRegs<Tag>> {
  using Row = Tag;
  static constexpr bool kKRegs = true;
};
template <typename KV>
inline constexpr bool kQuantKV = KVRowTraits<typename KVKind<KV>::Row>::kQuantized;
template <typename KV>
using MmaType = std::conditional_t<kQuantKV<KV>, __nv_bfloat16, KV>;
template <typename KV, int HD>
struct RawGeometry {
  // The largest row (int8 with groups of 8: d / 4 bytes of scales) plus the most a row can start
  // past a 16-byte boundary.
  static constexpr int kRowBytes = std::is_same_v<KV, Int8Row>   ? HD + HD / 4 + 16
                                   : std::is_same_v<KV, Int4Row> ? HD / 2 + HD / 4 + 16
                                                                 : HD + 16;
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kTileBytes = kKeyTile * kRowBytes + kKeyTile;  // rows, then their offsets
  static_assert(kTileBytes % 16 == 0, "the buffers after a raw tile stay 16-byte aligned");
};

// The head-dim column of k-step kk's columns 2q + i (i = 0, 1) and 2q + 8 + (i - 2) (i = 2, 3)
// for fp8 K: 32 (kk / 2) + 8q + 4 (kk % 2) + i, so a thread's four are adjacent bytes of a row.
__device__ __forceinline__ int QKColumn(int kk, int q, int i) { return 32 * (kk >> 1) + 8 * q + 4 * (kk & 1) + i; }

// K's B fragments from a raw fp8 tile (RawGeometry): two codes converted to an f16 pair a
// register (exact), each key's row scale applied to its scores.
template <typename Tag, int HD>
struct RawFp8K {
  const uint8_t* raw;
  using Raw = RawGeometry<Tag, HD>;
  __device__ __forceinline__ const uint8_t* Row(int r) const {
    return raw + r * Raw::kRowBytes + raw[kKeyTile * Raw::kRowBytes + r];
  }
  __device__ __forceinline__ static uint32_t Cvt(uint16_t codes) {
    constexpr __nv_fp8_interpretation_t kInterp = std::is_same_v<Tag, Fp8E4M3Row> ? __NV_E4M3 : __NV_E5M2;
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), kInterp);
    return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
  }
  // One 4-byte read a fragment: k-step kk's rows 2q, 2q + 1 and 2q + 8, 2q + 9 are head-dim
  // columns QKColumn(kk, q, 0..3) (Q's fragments use the same order; rows start 4-byte aligned).
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint32_t w = *reinterpret_cast<const uint32_t*>(Row(n * 8 + g) + QKColumn(kk, q, 0));
    b[0] = Cvt(static_cast<uint16_t>(w & 0xffff));
    b[1] = Cvt(static_cast<uint16_t>(w >> 16));
  }
  __device__ __forceinline__ float Scale(float x, int n, int j) const {
    return __fmul_rn(x, *reinterpret_cast<const float*>(Row(n * 8 + 2 * (threadIdx.x & 3) + j) + HD));
  }
};

// O += P V with V's B fragments built in registers from a raw fp8 tile (no bf16 tile in shared
// memory), on f16 tensor cores: V's codes convert to f16 exactly with one instruction a pair,
// and P takes each key's scale times a power of two 2^e chosen per tile (the tile's largest
// scale times 2^e in [1, 2)), so P's products stay in f16's normal range whatever the scales;
// O's accumulators hold O x 2^vexp (`vexp`: the last tile's e; rescaled exactly by a power of
// two when a tile's e differs; OScale undoes it). An all-zero tile (every scale 0: keys outside
// the block's range, zero rows) adds nothing and is skipped.
// A B fragment needs two keys at one column; a thread reads 4 bytes (4 columns) of each of its
// 4 keys a k-step and pairs them with byte permutes, so O's columns are permuted: n-tile 4c +
// i's column n holds head-dim column 32c + 4n + i (OutColumn<true> maps them back).
template <typename Tag, int HD>
__device__ __forceinline__ void AddRawFp8Values(const uint8_t* raw, const float (&s)[8][4], State<HD>& st,
                                                int& vexp) {
  using Raw = RawGeometry<Tag, HD>;
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  auto row = [&](int r) { return raw + r * Raw::kRowBytes + raw[kKeyTile * Raw::kRowBytes + r]; };
  auto scale_of = [&](int r) { return *reinterpret_cast<const float*>(row(r) + HD); };
  // The tile's largest scale (scales are >= 0), the same on every lane.
  float s_max = fmaxf(scale_of(lane), scale_of(lane + 32));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s_max = fmaxf(s_max, __shfl_xor_sync(0xffffffffu, s_max, o));
  if (s_max == 0.0f) return;
  const int ebits = min(253, max(1, (__float_as_int(s_max) >> 23) & 0xff));
  const int e = 127 - ebits;  // s_max x 2^e in [1, 2) for normal scales
  if (e != vexp) {
    const float r = __int_as_float(min(254, max(1, 127 + e - vexp)) << 23);  // 2^(e - vexp)
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) st.acc[dt][i] = __fmul_rn(st.acc[dt][i], r);
    }
    vexp = e;
  }
  const float f = __int_as_float((127 + e) << 23);
#pragma unroll
  for (int kk = 0; kk < kKeyTile / 16; ++kk) {
    // The thread's keys of this k-step: 2q, 2q + 1, 2q + 8, 2q + 9.
    const uint8_t* rows[4];
    float scale[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      rows[i] = row(kk * 16 + 2 * q + (i & 1) + 8 * (i >> 1));
      scale[i] = __fmul_rn(*reinterpret_cast<const float*>(rows[i] + HD), f);
    }
    const uint32_t a[4] = {PackPair<__half>(__fmul_rn(s[2 * kk][0], scale[0]), __fmul_rn(s[2 * kk][1], scale[1])),
                           PackPair<__half>(__fmul_rn(s[2 * kk][2], scale[0]), __fmul_rn(s[2 * kk][3], scale[1])),
                           PackPair<__half>(__fmul_rn(s[2 * kk + 1][0], scale[2]), __fmul_rn(s[2 * kk + 1][1], scale[3])),
                           PackPair<__half>(__fmul_rn(s[2 * kk + 1][2], scale[2]), __fmul_rn(s[2 * kk + 1][3], scale[3]))};
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = *reinterpret_cast<const uint32_t*>(rows[i] + 32 * c + 4 * g);
      // Code pairs (key 2q, key 2q + 1) and (2q + 8, 2q + 9) for columns 0-1 and 2-3 of the four.
      const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
      const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
      using K = RawFp8K<Tag, HD>;
      const uint32_t b[4][2] = {{K::Cvt(lo01 & 0xffff), K::Cvt(lo23 & 0xffff)},
                                {K::Cvt(lo01 >> 16), K::Cvt(lo23 >> 16)},
                                {K::Cvt(hi01 & 0xffff), K::Cvt(hi23 & 0xffff)},
                                {K::Cvt(hi01 >> 16), K::Cvt(hi23 >> 16)}};
#pragma unroll
      for (int i = 0; i < 4; ++i) Mma<__half>(st.acc[4 * c + i], a, b[i]);
    }
  }
}

// What O's accumulators are multiplied by to give O: 2^-vexp (AddRawFp8Values).
__device__ __forceinline__ float OScale(int vexp) { return __int_as_float((127 - vexp) << 23); }

// An int8 or int4 raw tile (RawGeometry) into the bf16 rows of `tile`, 8 values a thread at a
// time: code x its group's scale in f32 (DequantizeRun's products), rounded to bf16. Rows start
// 2-byte aligned in shared memory.
template <typename Row, int HD, int kThreads>
__device__ __forceinline__ void DequantizeTile(const uint8_t* raw, uint8_t* tile, int scale_group) {
  static_assert(std::is_same_v<Row, Int8Row> || std::is_same_v<Row, Int4Row>, "fp8 rows are read in registers");
  using Raw = RawGeometry<Row, HD>;
  constexpr int kRuns = HD / 8;
  for (int u = threadIdx.x; u < kKeyTile * kRuns; u += kThreads) {
    const int r = u / kRuns, i = (u % kRuns) * 8;
    const uint8_t* row = raw + r * Raw::kRowBytes + raw[kKeyTile * Raw::kRowBytes + r];
    uint32_t out[4];
    if constexpr (std::is_same_v<Row, Int8Row>) {
      const float s = __half2float(*reinterpret_cast<const __half*>(row + HD + 2 * (i / scale_group)));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t w = *reinterpret_cast<const uint16_t*>(row + i + 2 * j);
        out[j] = PackPair<__nv_bfloat16>(__fmul_rn(static_cast<float>(static_cast<int8_t>(w & 0xff)), s),
                                         __fmul_rn(static_cast<float>(static_cast<int8_t>(w >> 8)), s));
      }
    } else if constexpr (std::is_same_v<Row, Int4Row>) {  // nibbles q + 8, value 2k low
      const float s = __half2float(*reinterpret_cast<const __half*>(row + HD / 2 + 2 * (i / scale_group)));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t w = *reinterpret_cast<const uint16_t*>(row + i / 2 + 2 * j);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t b = w >> (8 * h);
          out[2 * j + h] = PackPair<__nv_bfloat16>(__fmul_rn(static_cast<float>(static_cast<int>(b & 15) - 8), s),
                                                   __fmul_rn(static_cast<float>(static_cast<int>((b >> 4) & 15) - 8), s));
        }
      }
    }
    *reinterpret_cast<uint4*>(tile + r * Geometry<HD>::kRowBytes + i * 2) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

}  // namespace pagoda::cuda::flash
