// FlashAttention over quantized KV rows (fp8 e4m3/e5m2, int8, int4, nvfp4): the raw tiles they
// land in, K's and V's fragments converted from them in registers, and the conversion into bf16
// tiles for int8 and int4 scale groups the register path does not take.
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

// Quantized caches (fp8 e4m3/e5m2: d codes then an f32 scale; int8: d codes, int4: d / 2 bytes
// of nibbles, then f16 scales, one per group of 8k values dividing d): a block's rows are
// head-major (kv/kv_codec.h), so a tile's rows of one KV head are runs of consecutive rows, one
// a paged block (at most 64 rows), each starting 16-byte aligned (FlashAttentionSupports); they
// land as they lie, row r of a raw tile at r x the row's bytes (RawRow: 132 for fp8 at d 128).
//   In registers (Fp8KRegs; IntRegs for int8/int4 with groups of 32k values; Fp4Regs for
//         nvfp4): K's and V's B fragments are converted from the raw tile, no bf16 tile (the raw
//         K and V buffers are all the shared memory a warp needs). fp8: codes to exact f16
//         values, a key's row scale multiplying its scores (RawFp8K) and, times the tile's power
//         of two, P before P is rounded to f16 (AddRawValues). int8/int4: codes to exact f16
//         values times their group's f16 scale, one rounding in f16 (RawIntK,
//         RawValueFragments). nvfp4: each E2M1 value times its group's e4m3 scale in f16
//         (exact: RawFp4K, RawValueFragments); the tensor scales fold into the softmax scale
//         (K) and the output (V). Q is rounded to f16; the products need no group sums and,
//         but for fp8, no scaled P.
//   Other int8/int4 groups: the tile is dequantized into bf16 rows (DequantizeTile; Geometry:
//         code x scale in f32, as the CPU codec dequantizes, rounded to bf16) and the products
//         run as for a bf16 cache.
template <typename Tag>
struct Fp8KRegs {};
template <typename Tag>
struct IntRegs {};  // int8 / int4 rows read in registers (IntRegsServe)
template <typename Tag>
struct Fp4Regs {};  // nvfp4 rows read in registers
template <typename Tag>
struct Kivi2Regs {};  // kivi2 rows read in registers (codes spans of the side pool only)
template <typename KV>
struct KVKind {
  using Row = KV;  // the row format (or element type)
  static constexpr bool kKRegs = false;  // K's and V's fragments converted in registers
};
template <typename Tag>
struct KVKind<Fp8KRegs<Tag>> {
  using Row = Tag;
  static constexpr bool kKRegs = true;
};
template <typename Tag>
struct KVKind<IntRegs<Tag>> {
  using Row = Tag;
  static constexpr bool kKRegs = true;
};
template <typename Tag>
struct KVKind<Fp4Regs<Tag>> {
  using Row = Tag;
  static constexpr bool kKRegs = true;
};
template <typename Tag>
struct KVKind<Kivi2Regs<Tag>> {
  using Row = Tag;
  static constexpr bool kKRegs = true;
};
template <typename Row>
inline constexpr bool kFp8Row = std::is_same_v<Row, Fp8E4M3Row> || std::is_same_v<Row, Fp8E5M2Row>;
template <typename Row>
inline constexpr bool kFp4Row = std::is_same_v<Row, Nvfp4Row>;
template <typename Row>
inline constexpr bool kKivi2Row = std::is_same_v<Row, Kivi2Row>;
// Bytes of codes before a row's scales.
template <typename Row, int HD>
inline constexpr int kCodeBytes = kKivi2Row<Row>                                                ? HD / 4
                                  : std::is_same_v<Row, Int4Row> || std::is_same_v<Row, Nvfp4Row> ? HD / 2
                                                                                                  : HD;

// Integer codes to exact f16 pairs with integer operations and one f16 instruction: a byte u
// below an f16 exponent byte 0x64 is 1024 + u.
// int8: bytes i and j of w (codes, offset by 128: w ^ 0x80808080) -> (code_i, code_j).
__device__ __forceinline__ uint32_t Int8Pair(uint32_t offset_codes, uint32_t sel) {
  const uint32_t x = __byte_perm(offset_codes, 0x64646464u, sel);
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&x), __half2(__half(1152.0f), __half(1152.0f)));
  return *reinterpret_cast<const uint32_t*>(&h);
}
// int4: one byte's two values (low nibble, high nibble), the byte in bytes 0 and 2 of x.
__device__ __forceinline__ uint32_t Int4Byte(uint32_t x) {
  const uint32_t y = (x & 0x00f0000fu) | 0x64006400u;
  const __half2 h = __hfma2(*reinterpret_cast<const __half2*>(&y), __half2(__half(1.0f), __half(0.0625f)),
                            __half2(__half(-1032.0f), __half(-72.0f)));
  return *reinterpret_cast<const uint32_t*>(&h);
}
// int4: the low nibbles (kHigh false) or high nibbles of bytes 0 and 2 of x, minus 8.
template <bool kHigh>
__device__ __forceinline__ uint32_t Int4Pair(uint32_t x) {
  const uint32_t y = (x & (kHigh ? 0x00f000f0u : 0x000f000fu)) | 0x64006400u;
  // low: 1024 + n - 1032; high: (1024 + 16 n) / 16 - 72 (exact in f16)
  const __half2 h = kHigh ? __hfma2(*reinterpret_cast<const __half2*>(&y), __half2(__half(0.0625f), __half(0.0625f)),
                                    __half2(__half(-72.0f), __half(-72.0f)))
                          : __hsub2(*reinterpret_cast<const __half2*>(&y), __half2(__half(1032.0f), __half(1032.0f)));
  return *reinterpret_cast<const uint32_t*>(&h);
}
// Four E2M1 nibbles (bits 4k..4k + 3 of w, k = 0..3) as four e4m3 bytes (byte k) of 2^-6 times
// their value, so that one cvt turns two of them into an exact f16 pair: an E2M1 value s e1 e0 m
// is 2^(e - 1) (1 + m / 2), or m / 2 where e = 0; the e4m3 byte s 0 0 e1 e0 m 0 0 has exponent
// field e and mantissa m00: 2^(e - 7) (1 + m / 2), and e4m3's subnormals give 2^-6 m / 2, so
// every code is 2^-6 times its value. The scales (ScaleX64) carry the 2^6 back: the products
// are the same exact f16 values as E2M1 x scale.
__device__ __forceinline__ uint32_t Fp4ToE4m3x4(uint32_t w) {
  const uint32_t a = __byte_perm(w, 0, 0x4140);       // byte 0 to byte 0, byte 1 to byte 2
  const uint32_t c = (a | (a << 4)) & 0x0F0F0F0Fu;    // nibble k in byte k
  return (c + 3 * (c & 0x08080808u)) << 2;            // m + 4 s8, then x 4: s to bit 7, e1 e0 m to bits 4-2
}
// Two fp8 codes (the low 16 bits of x, byte 0 low) as an exact f16 pair: one cvt.
template <__nv_fp8_interpretation_t kInterp = __NV_E4M3>
__device__ __forceinline__ uint32_t Fp8x2ToHalf2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), kInterp);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}
// x * y on f16 pairs: the codes' exact f16 values times their f16 scales.
__device__ __forceinline__ uint32_t HMul2(uint32_t x, uint32_t y) {
  const __half2 h = __hmul2(*reinterpret_cast<const __half2*>(&x), *reinterpret_cast<const __half2*>(&y));
  return *reinterpret_cast<const uint32_t*>(&h);
}
// A pair of e4m3 scales as f16 times 2^6 (exact: at most 448 x 64 = 28672), for codes from
// Fp4ToE4m3x4: (value x 2^-6) x (scale x 2^6) is the exact f16 of value x scale (at most 6 x 448,
// at least 0.5 x 2^-9; 2 + 4 significant bits), as if the value had been multiplied by the scale
// (a low).
__device__ __forceinline__ uint32_t ScaleX64(uint8_t a, uint8_t b) {
  return HMul2(Fp8x2ToHalf2(a | b << 8), 0x54005400u);
}

template <typename KV>
inline constexpr bool kQuantKV = KVRowTraits<typename KVKind<KV>::Row>::kQuantized;
template <typename KV>
using MmaType = std::conditional_t<kQuantKV<KV>, __nv_bfloat16, KV>;
template <typename KV, int HD>
struct RawGeometry {
  // The largest row: int8 with groups of 8 (d / 4 bytes of scales), fp8's f32 scale.
  // kivi2: K's tile is 64 rows of HD / 4 bytes of codes and up to four runs' HD x 4 bytes of
  // per-channel (scale, min) pairs (paged blocks of at least 16 slots), 32 HD bytes in all, and V's
  // 64 rows of HD / 4 codes and a (scale, min) pair a group of at least 32 values: HD / 2 a row.
  static constexpr int kMaxRowBytes = std::is_same_v<KV, Int8Row>    ? HD + HD / 4
                                      : std::is_same_v<KV, Int4Row>  ? HD / 2 + HD / 4
                                      : std::is_same_v<KV, Nvfp4Row> ? HD / 2 + HD / 16
                                      : kKivi2Row<KV>                ? HD / 2
                                                                     : HD + 4;
  // A tile's rows rounded up to 128 bytes: the one-warp shapes put each tile at a 128-byte
  // boundary.
  static constexpr int kTileBytes = (kKeyTile * kMaxRowBytes + 127) / 128 * 128;
};

// Row r of a raw tile of rows of `pitch` bytes (the format's row bytes).
__device__ __forceinline__ const uint8_t* RawRow(const uint8_t* raw, int r, int pitch) { return raw + r * pitch; }

// The head-dim column of k-step kk's columns 2q + i (i = 0, 1) and 2q + 8 + (i - 2) (i = 2, 3)
// for K read in registers: 32 (kk / 2) + 8q + 4 (kk % 2) + i, so a thread's four are adjacent
// in a row.
__device__ __forceinline__ int QKColumn(int kk, int q, int i) { return 32 * (kk >> 1) + 8 * q + 4 * (kk & 1) + i; }

// The wide shape's fragment tiles (more than one warp a block, kTile sources): the B fragments
// of a raw tile built once, by the block's warps in turn, with the one-warp shapes' own
// functions, and stored as each lane holds them, so every warp reads its fragments with one
// conflict-free 8- or 16-byte load instead of converting the whole tile itself: the same f16
// values in the same products, so the same bits as the one-warp shapes. K's fragment (n, kk) of
// a lane at FragK; V's four fragment pairs of k-step kk and 32-column block c at FragV (two
// 16-byte halves, each contiguous over the lanes). Scales stay in the raw rows.
template <int HD>
__device__ __forceinline__ int FragK(int n, int kk, int lane) { return ((n * (HD / 16) + kk) * 32 + lane) * 8; }
template <int HD>
__device__ __forceinline__ int FragV(int kk, int c, int half, int lane) {
  return (((kk * (HD / 32) + c) * 2 + half) * 32 + lane) * 16;
}
template <int HD>
__device__ __forceinline__ void FragKLoad(const uint8_t* frags, int n, int kk, uint32_t (&b)[2]) {
  const uint2 v = *reinterpret_cast<const uint2*>(frags + FragK<HD>(n, kk, threadIdx.x & 31));
  b[0] = v.x;
  b[1] = v.y;
}
template <int HD>
__device__ __forceinline__ void FragVLoad(const uint8_t* frags, int kk, int c, uint32_t (&b)[4][2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 v = *reinterpret_cast<const uint4*>(frags + FragV<HD>(kk, c, h, threadIdx.x & 31));
    b[2 * h][0] = v.x, b[2 * h][1] = v.y, b[2 * h + 1][0] = v.z, b[2 * h + 1][1] = v.w;
  }
}

// K's B fragments from a raw fp8 tile (RawGeometry): two codes converted to an f16 pair a
// register (exact), each key's row scale applied to its scores.
template <typename Tag, int HD, bool kTile = false>
struct RawFp8K {
  const uint8_t* raw;
  __device__ __forceinline__ const uint8_t* Row(int r) const { return RawRow(raw, r, pitch); }
  __device__ __forceinline__ static uint32_t Cvt(uint16_t codes) {
    constexpr __nv_fp8_interpretation_t kInterp = std::is_same_v<Tag, Fp8E4M3Row> ? __NV_E4M3 : __NV_E5M2;
    return Fp8x2ToHalf2<kInterp>(codes);
  }
  // One 4-byte read a fragment: k-step kk's rows 2q, 2q + 1 and 2q + 8, 2q + 9 are head-dim
  // columns QKColumn(kk, q, 0..3) (Q's fragments use the same order; rows start 4-byte aligned).
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    if constexpr (kTile) return FragKLoad<HD>(frags, n, kk, b);
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint32_t w = *reinterpret_cast<const uint32_t*>(Row(TileKey<true>(n, g)) + QKColumn(kk, q, 0));
    b[0] = Cvt(static_cast<uint16_t>(w & 0xffff));
    b[1] = Cvt(static_cast<uint16_t>(w >> 16));
  }
  __device__ __forceinline__ float Scale(float x, int n, int j) const {
    return __fmul_rn(x, *reinterpret_cast<const float*>(Row(TileKey<true>(n, 2 * (threadIdx.x & 3) + j)) + HD));
  }
  static constexpr bool kSpread = true;  // TileKey's spread keys: rows of 33 words
  int group_shift;       // unused (one scale a row)
  const uint8_t* frags;  // kTile: the fragment tile (BuildFragments)
  int pitch;             // the raw rows' bytes
};

// K's B fragments from a raw int8 or int4 tile (QKColumn's order, as fp8): a thread's four
// columns of a k-step lie in one scale group (groups of 32k values), so each code, exact in f16,
// is multiplied by its group's f16 scale in f16 (one rounding, 2^-11 relative: finer than the
// bf16 tiles other groups take), and Q K^T needs no group sums. The groups are powers of two
// (IntRegsServe): a column's group is a shift, not a division.
template <typename Tag, int HD, bool kTile = false>
struct RawIntK {
  const uint8_t* raw;
  int group_shift;  // log2 of the values a scale
  const uint8_t* frags;  // kTile: the fragment tile (BuildFragments)
  int pitch;             // the raw rows' bytes
  __device__ __forceinline__ const uint8_t* Row(int r) const { return RawRow(raw, r, pitch); }
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    if constexpr (kTile) return FragKLoad<HD>(frags, n, kk, b);
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint8_t* row = Row(n * 8 + g);
    const int col = QKColumn(kk, q, 0);
    const uint32_t sc = *reinterpret_cast<const uint16_t*>(row + kCodeBytes<Tag, HD> + 2 * (col >> group_shift));
    const uint32_t s2 = sc | sc << 16;
    if constexpr (std::is_same_v<Tag, Int8Row>) {  // rows 4-byte aligned (IntRegsServe)
      const uint32_t u = *reinterpret_cast<const uint32_t*>(row + col) ^ 0x80808080u;
      b[0] = HMul2(Int8Pair(u, 0x4140), s2);
      b[1] = HMul2(Int8Pair(u, 0x4342), s2);
    } else {  // two bytes: columns c, c + 1 and c + 2, c + 3 (low nibble first)
      const uint32_t w = *reinterpret_cast<const uint16_t*>(row + col / 2);
      b[0] = HMul2(Int4Byte(__byte_perm(w, 0, 0x4040)), s2);  // byte 0 in both halves
      b[1] = HMul2(Int4Byte(__byte_perm(w, 0, 0x4141)), s2);  // byte 1
    }
  }
  __device__ __forceinline__ float Scale(float x, int, int) const { return x; }
};
// K's B fragments from a raw nvfp4 tile (QKColumn's order, as fp8): a thread's 4 columns of a
// k-step are two bytes of nibbles in one 16-value group, each value times the group's e4m3 scale
// in f16 (exact), so Q K^T needs no group sums; the tensor scale is folded into the softmax scale
// (KernelArgs::scale_log2).
template <typename Tag, int HD, bool kTile = false>
struct RawFp4K {
  const uint8_t* raw;
  __device__ __forceinline__ const uint8_t* Row(int r) const { return RawRow(raw, r, pitch); }
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    if constexpr (kTile) return FragKLoad<HD>(frags, n, kk, b);
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint8_t* row = Row(n * 8 + g);
    const int col = QKColumn(kk, q, 0);
    const uint32_t w = *reinterpret_cast<const uint16_t*>(row + col / 2);  // columns col..col + 3
    const uint8_t sc = row[HD / 2 + col / 16];
    const uint32_t s2 = ScaleX64(sc, sc);
    const uint32_t e = Fp4ToE4m3x4(w);
    b[0] = HMul2(Fp8x2ToHalf2(e), s2);
    b[1] = HMul2(Fp8x2ToHalf2(e >> 16), s2);
  }
  __device__ __forceinline__ float Scale(float x, int, int) const { return x; }
  int group_shift;       // unused (a scale per 16 values)
  const uint8_t* frags;  // kTile: the fragment tile (BuildFragments)
  int pitch;             // the raw rows' bytes
};

// kivi2's 2-bit codes to exact f16 pairs: codes in bits 0-1 and 16-17 of x (the rest ignored).
__device__ __forceinline__ uint32_t Kivi2Pair(uint32_t x) {
  const uint32_t y = (x & 0x00030003u) | 0x64006400u;  // 1024 + code
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&y), __half2(__half(1024.0f), __half(1024.0f)));
  return *reinterpret_cast<const uint32_t*>(&h);
}
// min + code x scale for a pair of values in f16 (one rounding, as int4's code x scale): codes
// as for Kivi2Pair, wa / wb the two values' (f16 scale, f16 min) words (scale low, as stored).
__device__ __forceinline__ uint32_t Kivi2Values(uint32_t codes, uint32_t wa, uint32_t wb) {
  const uint32_t s2 = __byte_perm(wa, wb, 0x5410), m2 = __byte_perm(wa, wb, 0x7632);
  const uint32_t c = Kivi2Pair(codes);
  const __half2 h = __hfma2(*reinterpret_cast<const __half2*>(&c), *reinterpret_cast<const __half2*>(&s2),
                            *reinterpret_cast<const __half2*>(&m2));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// K's B fragments from a raw kivi2 key tile (QKColumn's order): 64 rows of HD / 4 bytes of codes
// (value i in bits 2 (i % 4) of byte i / 4), then each run's (paged block's) per-channel
// (f16 scale, f16 min) words, HD x 4 bytes a run (flash_kernel.cuh's bulk copies). A thread's
// four columns of a k-step are one byte of codes and one 16-byte read of their four words; each
// value min + code x scale in f16.
template <typename Tag, int HD, bool kTile = false>
struct RawKivi2K {
  const uint8_t* raw;
  int group_shift;  // log2 of the keys a run (the paged block's slots, at most 64)
  const uint8_t* frags;  // kTile: the fragment tile (unused: kivi2 runs the one-warp shapes only)
  int pitch;             // HD / 4
  __device__ __forceinline__ void Load(int n, int kk, uint32_t (&b)[2]) const {
    if constexpr (kTile) return FragKLoad<HD>(frags, n, kk, b);
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int key = n * 8 + g, col = QKColumn(kk, q, 0);
    const uint32_t codes = raw[key * (HD / 4) + col / 4];
    const uint4 w = *reinterpret_cast<const uint4*>(raw + kKeyTile * (HD / 4) + (key >> group_shift) * HD * 4 + col * 4);
    b[0] = Kivi2Values(codes | (codes << 14), w.x, w.y);              // columns col, col + 1
    b[1] = Kivi2Values((codes >> 4) | (codes << 10), w.z, w.w);       // col + 2, col + 3
  }
  __device__ __forceinline__ float Scale(float x, int, int) const { return x; }
};

template <typename Row, int HD, bool kTile = false>
using RawK = std::conditional_t<
    kFp8Row<Row>, RawFp8K<Row, HD, kTile>,
    std::conditional_t<kFp4Row<Row>, RawFp4K<Row, HD, kTile>,
                       std::conditional_t<kKivi2Row<Row>, RawKivi2K<Row, HD, kTile>, RawIntK<Row, HD, kTile>>>>;

// The f16 scales of group gi of two int8 or int4 rows, as a pair (row a low).
template <typename Tag, int HD>
__device__ __forceinline__ uint32_t IntScalePair(const uint8_t* a, const uint8_t* b, int gi) {
  const uint32_t sa = *reinterpret_cast<const uint16_t*>(a + kCodeBytes<Tag, HD> + 2 * gi);
  const uint32_t sb = *reinterpret_cast<const uint16_t*>(b + kCodeBytes<Tag, HD> + 2 * gi);
  return sa | sb << 16;
}

// V's B fragments for k-step kk's keys `rows` (2q, 2q + 1, 2q + 8, 2q + 9 of the thread's quad)
// and the 32-column block c, in OutColumn's order: b[i] is n-tile 4c + i's fragment (its column
// n: head-dim column 32c + 4n + i). A thread reads 4 columns of each of its 4 keys and pairs them
// with byte permutes; codes to exact f16 values.
// int8 and int4: each value times its (key, group) f16 scale in f16 (one rounding, as K's), so
// P V takes P as it is; V's scale groups are 2^group_shift (32k) columns.
template <typename Tag, int HD>
__device__ __forceinline__ void RawValueFragments(const uint8_t* const (&rows)[4], int c, uint32_t (&b)[4][2],
                                                  int group_shift = 0) {
  constexpr bool kFp8 = kFp8Row<Tag>;
  const int g = (threadIdx.x & 31) >> 2;
  if constexpr (kFp8) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = *reinterpret_cast<const uint32_t*>(rows[i] + 32 * c + 4 * g);
    // Code pairs (key 2q, key 2q + 1) and (2q + 8, 2q + 9) for columns 0-1 and 2-3 of the four.
    const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    using K = RawFp8K<Tag, HD>;
    b[0][0] = K::Cvt(lo01 & 0xffff), b[0][1] = K::Cvt(lo23 & 0xffff);
    b[1][0] = K::Cvt(lo01 >> 16), b[1][1] = K::Cvt(lo23 >> 16);
    b[2][0] = K::Cvt(hi01 & 0xffff), b[2][1] = K::Cvt(hi23 & 0xffff);
    b[3][0] = K::Cvt(hi01 >> 16), b[3][1] = K::Cvt(hi23 >> 16);
  } else if constexpr (std::is_same_v<Tag, Int8Row>) {  // rows 4-byte aligned (IntRegsServe)
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = *reinterpret_cast<const uint32_t*>(rows[i] + 32 * c + 4 * g) ^ 0x80808080u;
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // keys (2q, 2q + 1), then (2q + 8, 2q + 9)
      const uint32_t s2 = IntScalePair<Tag, HD>(rows[2 * k], rows[2 * k + 1], (32 * c) >> group_shift);
      const uint32_t lo = __byte_perm(w[2 * k], w[2 * k + 1], 0x5140), hi = __byte_perm(w[2 * k], w[2 * k + 1], 0x7362);
      b[0][k] = HMul2(Int8Pair(lo, 0x4140), s2), b[1][k] = HMul2(Int8Pair(lo, 0x4342), s2);
      b[2][k] = HMul2(Int8Pair(hi, 0x4140), s2), b[3][k] = HMul2(Int8Pair(hi, 0x4342), s2);
    }
  } else if constexpr (kFp4Row<Tag>) {  // nvfp4: two bytes a key, its columns' group scale
    uint32_t e[4];
    uint8_t sc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      e[i] = Fp4ToE4m3x4(*reinterpret_cast<const uint16_t*>(rows[i] + 16 * c + 2 * g));
      sc[i] = rows[i][HD / 2 + 2 * c + (g >> 2)];  // columns 32c + 4g..+3: group 2c + g / 4
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // keys (2q, 2q + 1), then (2q + 8, 2q + 9)
      const uint32_t s2 = ScaleX64(sc[2 * k], sc[2 * k + 1]);
      // Column i's codes of the two keys side by side (as fp8's pairs above).
      const uint32_t lo = __byte_perm(e[2 * k], e[2 * k + 1], 0x5140), hi = __byte_perm(e[2 * k], e[2 * k + 1], 0x7362);
      b[0][k] = HMul2(Fp8x2ToHalf2(lo), s2), b[1][k] = HMul2(Fp8x2ToHalf2(lo >> 16), s2);
      b[2][k] = HMul2(Fp8x2ToHalf2(hi), s2), b[3][k] = HMul2(Fp8x2ToHalf2(hi >> 16), s2);
    }
  } else if constexpr (kKivi2Row<Tag>) {  // one byte a key (columns 32c + 4g..+3), its group's (scale, min)
    uint32_t w[4], sm[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = rows[i][8 * c + g];
      sm[i] = *reinterpret_cast<const uint32_t*>(rows[i] + HD / 4 + 4 * ((32 * c) >> group_shift));
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // keys (2q, 2q + 1), then (2q + 8, 2q + 9)
      const uint32_t x = w[2 * k] | w[2 * k + 1] << 16;  // key a's codes in bits 0-7, key b's in 16-23
#pragma unroll
      for (int i = 0; i < 4; ++i) b[i][k] = Kivi2Values(x >> (2 * i), sm[2 * k], sm[2 * k + 1]);
    }
  } else {  // int4: two bytes a key (columns 4g..4g + 3, low nibble first)
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = *reinterpret_cast<const uint16_t*>(rows[i] + 16 * c + 2 * g);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t s2 = IntScalePair<Tag, HD>(rows[2 * k], rows[2 * k + 1], (32 * c) >> group_shift);
      const uint32_t x0 = __byte_perm(w[2 * k], w[2 * k + 1], 0x6420);  // (key a byte 0, key b byte 0)
      const uint32_t x1 = __byte_perm(w[2 * k], w[2 * k + 1], 0x6521);  // byte 1 of each
      b[0][k] = HMul2(Int4Pair<false>(x0), s2), b[1][k] = HMul2(Int4Pair<true>(x0), s2);
      b[2][k] = HMul2(Int4Pair<false>(x1), s2), b[3][k] = HMul2(Int4Pair<true>(x1), s2);
    }
  }
}

// The wide shape's fragment tiles of one raw K and V tile (FragK, FragV), the block's warps
// taking K's n-tiles and V's k-steps in turn. A barrier must follow before they are read.
template <typename Tag, int HD, int kWarps>
__device__ __forceinline__ void BuildFragments(const uint8_t* raw_k, const uint8_t* raw_v, int k_group_shift,
                                               int v_group_shift, int k_pitch, int v_pitch, uint8_t* k_frags,
                                               uint8_t* v_frags) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, q = lane & 3;
  const RawK<Tag, HD> k{raw_k, k_group_shift, nullptr, k_pitch};
  for (int n = warp; n < 8; n += kWarps) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t b[2];
      k.Load(n, kk, b);
      *reinterpret_cast<uint2*>(k_frags + FragK<HD>(n, kk, lane)) = make_uint2(b[0], b[1]);
    }
  }
  for (int kk = warp; kk < kKeyTile / 16; kk += kWarps) {
    const uint8_t* rows[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) rows[i] = RawRow(raw_v, TileKey<kFp8Row<Tag>>(2 * kk + (i >> 1), 2 * q + (i & 1)), v_pitch);
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      uint32_t b[4][2];
      RawValueFragments<Tag, HD>(rows, c, b, v_group_shift);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<uint4*>(v_frags + FragV<HD>(kk, c, h, lane)) =
            make_uint4(b[2 * h][0], b[2 * h][1], b[2 * h + 1][0], b[2 * h + 1][1]);
      }
    }
  }
}

// O += P V with V's B fragments built in registers from a raw tile (no bf16 tile in shared
// memory), on f16 tensor cores. int8, int4 and nvfp4: V's fragments carry their scales
// (RawValueFragments), so P goes in as it is. fp8: V's codes convert to f16 exactly (one
// instruction a pair) and P takes each key's row scale times a power of two 2^e chosen per tile
// (the tile's largest scale times 2^e in [1, 2)), so P's products stay in f16's normal range
// whatever the scales; O's accumulators hold O x 2^vexp (`vexp`: the last tile's e; rescaled
// exactly by a power of two when a tile's e differs; OScale undoes it). The largest scale is
// taken over the tile's rows [r_lo, r_hi] (the keys of the block's range; the others are masked,
// P = 0, and may hold another sequence's rows of a shared paged block), so it never depends on
// what lies outside them. A tile whose scales there are all 0 (zero rows) adds nothing and is
// skipped.
// A B fragment needs two keys at one column; a thread reads 4 columns of each of its 4 keys a
// k-step and pairs them with byte permutes, so O's columns are permuted: n-tile 4c + i's column n
// holds head-dim column 32c + 4n + i (OutColumn<true> maps them back).
template <typename Tag, int HD, bool kTile = false>
__device__ __forceinline__ void AddRawValues(const uint8_t* raw, int pitch, int r_lo, int r_hi, const float (&s)[8][4],
                                             State<HD>& st, int& vexp, int group_shift,
                                             const uint8_t* v_frags = nullptr) {
  constexpr bool kFp8 = kFp8Row<Tag>;
  const int lane = threadIdx.x & 31, q = lane & 3;
  if constexpr (!kFp8) {  // V's fragments carry their scales: P as it is, in f16
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      const uint8_t* rows[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) rows[i] = RawRow(raw, TileKey<false>(2 * kk + (i >> 1), 2 * q + (i & 1)), pitch);
      const uint32_t a[4] = {PackPair<__half>(s[2 * kk][0], s[2 * kk][1]),
                             PackPair<__half>(s[2 * kk][2], s[2 * kk][3]),
                             PackPair<__half>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             PackPair<__half>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int c = 0; c < HD / 32; ++c) {
        uint32_t b[4][2];
        if constexpr (kTile) {
          FragVLoad<HD>(v_frags, kk, c, b);
        } else {
          RawValueFragments<Tag, HD>(rows, c, b, group_shift);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) Mma<__half>(st.acc[4 * c + i], a, b[i]);
      }
    }
    return;
  }
  // fp8: P times each key's row scale times 2^e.
  auto row = [&](int r) { return RawRow(raw, r, pitch); };
  auto scale_of = [&](const uint8_t* r) { return *reinterpret_cast<const float*>(r + HD); };
  // The largest scale of rows [r_lo, r_hi] (scales are >= 0), the same on every lane.
  const bool in0 = lane >= r_lo && lane <= r_hi, in1 = lane + 32 >= r_lo && lane + 32 <= r_hi;
  float s_max = fmaxf(in0 ? scale_of(row(lane)) : 0.0f, in1 ? scale_of(row(lane + 32)) : 0.0f);
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
#pragma unroll
    for (int i = 0; i < 4; ++i) rows[i] = row(TileKey<kFp8>(2 * kk + (i >> 1), 2 * q + (i & 1)));
    float scale[4];  // the keys' scales times 2^e
#pragma unroll
    for (int i = 0; i < 4; ++i) scale[i] = __fmul_rn(scale_of(rows[i]), f);
    const uint32_t a[4] = {PackPair<__half>(__fmul_rn(s[2 * kk][0], scale[0]), __fmul_rn(s[2 * kk][1], scale[1])),
                           PackPair<__half>(__fmul_rn(s[2 * kk][2], scale[0]), __fmul_rn(s[2 * kk][3], scale[1])),
                           PackPair<__half>(__fmul_rn(s[2 * kk + 1][0], scale[2]), __fmul_rn(s[2 * kk + 1][1], scale[3])),
                           PackPair<__half>(__fmul_rn(s[2 * kk + 1][2], scale[2]), __fmul_rn(s[2 * kk + 1][3], scale[3]))};
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      uint32_t b[4][2];
      if constexpr (kTile) {  // built once for the block (BuildFragments)
        FragVLoad<HD>(v_frags, kk, c, b);
      } else {
        RawValueFragments<Tag, HD>(rows, c, b);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) Mma<__half>(st.acc[4 * c + i], a, b[i]);
    }
  }
}

// What O's accumulators are multiplied by to give O: 2^-vexp (AddRawValues).
__device__ __forceinline__ float OScale(int vexp) { return __int_as_float((127 - vexp) << 23); }

// An int8 or int4 raw tile (RawGeometry) into the bf16 rows of `tile`, 8 values a thread at a
// time: code x its group's scale in f32 (DequantizeRun's products), rounded to bf16. Rows start
// 2-byte aligned in shared memory.
template <typename Row, int HD, int kThreads>
__device__ __forceinline__ void DequantizeTile(const uint8_t* raw, int pitch, uint8_t* tile, int scale_group) {
  static_assert(std::is_same_v<Row, Int8Row> || std::is_same_v<Row, Int4Row>, "fp8 and nvfp4 rows are read in registers");
  constexpr int kRuns = HD / 8;
  for (int u = threadIdx.x; u < kKeyTile * kRuns; u += kThreads) {
    const int r = u / kRuns, i = (u % kRuns) * 8;
    const uint8_t* row = RawRow(raw, r, pitch);
    uint32_t out[4];
    const float s = __half2float(*reinterpret_cast<const __half*>(row + kCodeBytes<Row, HD> + 2 * (i / scale_group)));
    if constexpr (std::is_same_v<Row, Int8Row>) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t w = *reinterpret_cast<const uint16_t*>(row + i + 2 * j);
        out[j] = PackPair<__nv_bfloat16>(__fmul_rn(static_cast<float>(static_cast<int8_t>(w & 0xff)), s),
                                         __fmul_rn(static_cast<float>(static_cast<int8_t>(w >> 8)), s));
      }
    } else {  // int4: nibbles q + 8, value 2k low
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
