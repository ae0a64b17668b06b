// Reference dequantizers for ggml's K-quants, the weight types most GGUF downloads use.
//
// Each type packs 256 values into one super-block (ggml's block_q4_K / block_q5_K /
// block_q6_K, little-endian, no padding). The super-block is split into sub-blocks that
// carry their own 6-bit (Q4_K, Q5_K) or 8-bit (Q6_K) scales, themselves scaled by fp16
// super-block factors:
//
//   Q4_K  144 bytes: fp16 d | fp16 dmin | scales[12] | qs[128]
//         8 sub-blocks of 32; scales[12] packs eight 6-bit scales sc and eight 6-bit mins m;
//         qs: for each 64 values, 32 bytes, low nibbles = the first 32, high = the next 32.
//         x = (d * sc) * q - (dmin * m),  q in [0, 15]
//   Q5_K  176 bytes: fp16 d | fp16 dmin | scales[12] | qh[32] | qs[128]
//         as Q4_K plus a fifth bit per value: value 64*j + i (i < 32) takes bit 2j of qh[i],
//         value 64*j + 32 + i bit 2j+1.  x = (d * sc) * q - (dmin * m),  q in [0, 31]
//   Q6_K  210 bytes: ql[128] | qh[64] | int8 scales[16] | fp16 d
//         16 sub-blocks of 16; per 128 values: 64 bytes of ql (4 low bits) and 32 of qh
//         (2 high bits).  x = (d * scale) * (q - 32),  q in [0, 63]
//
// The arithmetic is ggml's dequantize_row_q*_K, operation for operation, so results are
// bit-identical to ggml and to the gguf Python package.
// Thread-safe (pure functions).
#pragma once

#include <cstdint>

namespace pagoda {

inline constexpr int64_t kQkK = 256;  // values per K-quant super-block

// Each dequantizes n values (REQUIRES: n % 256 == 0) from src (n / 256 super-blocks,
// no alignment required) into dst [n].
void DequantizeRowQ4K(const void* src, float* dst, int64_t n);
void DequantizeRowQ5K(const void* src, float* dst, int64_t n);
void DequantizeRowQ6K(const void* src, float* dst, int64_t n);

}  // namespace pagoda
