// Byte layouts of quantized KV blocks, and the row codecs that the KV storage (quantize on
// write) and the attention kernels (dequantize a row into a small tile) share.
//
// A block of one K or V array of one layer holds block_size tokens x num_heads heads x
// head_dim values (d). Every block is self-contained: its codes and all their scales live in
// its bytes, so copying, sharing and evicting blocks moves whole blocks.
//
// Per-token formats: a block is num_heads x block_size rows (head-major: a head's rows of the
// block's tokens are consecutive, KVRowIndex), each row (one token, one head) = [codes][scales];
// ng = ceil(d / group). Head-major because attention reads one KV head at a time: the head's
// rows of a block are one contiguous run (fp8 at d 128: 16 rows of 132 bytes, 2112 bytes, whole
// 32-byte sectors), where token-major rows of 132 bytes at a pitch of num_heads x 132 would each
// span five sectors for four and an eighth of data. kNone rows stay token-major (the unquantized
// caches' [block, slot, head, d] layout):
//   kNone     d x sizeof(dtype)
//   kFp8E4M3  d x e4m3 code, f32 scale (dynamic: amax / 448; or the per-tensor scale)
//   kFp8E5M2  d x e5m2 code, f32 scale (dynamic: amax / 57344; or the per-tensor scale)
//   kInt8     d x int8 (-127..127), ng x f16 scale (amax_group / 127)          symmetric
//   kInt4     ceil(d/2) bytes (value 2i in the low nibble, 2i+1 high; q + 8, q in -7..7),
//             ng x f16 scale (amax_group / 7)                                    symmetric
//   kNvfp4    ceil(d/2) bytes of E2M1 nibbles (same order), ceil(d/16) x e4m3 scale;
//             x = e2m1 * e4m3_scale * tensor_scale                        (NVIDIA NVFP4)
//   kKivi2    (values) ceil(d/4) bytes of 2-bit codes (value i in bits 2(i%4)), ng x (f16
//             scale, f16 min); x = min + code * scale                          asymmetric
// Per-channel format (kivi2 keys):
//   [num_heads x d x (f16 scale, f16 min)] over the block's tokens, then num_heads x
//   block_size rows of ceil(d/4) bytes of 2-bit codes (head-major), then zero padding to a whole number of
//   bytes per token (KVBlockBytes is a multiple of block_size). The codes are written when
//   the block is full (QuantizeKVBlockPerChannel); until then the block's keys live in a wide
//   copy (the KIVI residual, see backend/kv_storage.h).
//
// Heavy rows (heavy_rows = K > 0, quantized formats): after the block's bytes above, a tail
//   [valid u8][K x u8 token offsets][K x num_heads x head_dim bf16 rows]
// padded to a multiple of block_size bytes: bf16 copies of the K tokens chosen by the
// storage (backend/kv_storage.h: most attention mass from the block's own queries). While
// valid, DequantizeKVRow returns those rows instead of the codes.
//
// Scales are rounded to their storage type first and the codes computed against the
// rounded scale, so dequantization is exactly code x stored scale.
#pragma once

#include <cstdint>

#include "kv/kv_format.h"

namespace pagoda {

// Bytes of one (token, head) row of a per-token format (not kivi2 keys).
int64_t KVRowBytes(const KVArrayFormat& f);
// Bytes of one block of the array; a multiple of f.block_size.
int64_t KVBlockBytes(const KVArrayFormat& f);
// Row (offset, head)'s index among the block's rows: head * block_size + offset for the
// quantized formats (head-major), offset * num_heads + head for kNone.
int64_t KVRowIndex(const KVArrayFormat& f, int64_t offset, int64_t head);

// Quantizes x [head_dim] f32 into row (offset, head) of `block` [KVBlockBytes].
// REQUIRES: !f.per_channel.
void QuantizeKVRow(const KVArrayFormat& f, const float* x, uint8_t* block, int64_t offset,
                   int64_t head);
// Quantizes a whole block x [block_size, num_heads, head_dim] f32. Per-channel formats compute
// each (head, channel)'s scale and min over the block's tokens; others row by row.
void QuantizeKVBlock(const KVArrayFormat& f, const float* x, uint8_t* block);
// Stores the heavy rows of a block: offsets [heavy_rows] and rows [heavy_rows, num_heads,
// head_dim] f32 (rounded to bf16); ClearHeavyRows marks them invalid (a reused block).
void SetHeavyRows(const KVArrayFormat& f, uint8_t* block, const int64_t* offsets, const float* rows);
void ClearHeavyRows(const KVArrayFormat& f, uint8_t* block);

// Dequantizes row (offset, head) of `block` into out [head_dim] f32.
void DequantizeKVRow(const KVArrayFormat& f, const uint8_t* block, int64_t offset, int64_t head,
                     float* out);

}  // namespace pagoda
