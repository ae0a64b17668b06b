// The bytes of the paged KV cache on the CPU backend: per layer, a K array of blocks
// [num_blocks, block_size, num_kv_heads, head_dim] and a V array of blocks
// [num_blocks, block_size, num_kv_heads, head_dim_v] (MLA: K holds the latent c_kv and
// V the RoPE key k_pe, one "head"). A block id means the same slot in every layer (kv/
// hands out ids; this class only holds the bytes).
//
// Quantized caches (shape.quant != kNone): each array stores blocks in its KVArrayFormat
// (byte layouts: kv/kv_codec.h). Blocks are self-contained: codes and scales live
// in the block, so CopyBlock, prefix sharing and eviction move whole blocks. Layers listed in
// wide_layers, and the V array when !quantize_v (MLA: k_pe stays bf16, RoPE-aware), keep
// `dtype` elements.
//
// Wide side pool (design note). Three policies need some tokens at full (`dtype`) width:
//   - kivi2: keys are quantized per channel over a block's tokens, so a block's keys can be
//     quantized only once the block is full; until then the block lives in a wide copy (the
//     KIVI residual) and attention reads the query's own block from it (K and V).
//   - recent_tokens R: keys in the query's own block within R positions of it read the wide
//     copy (the recent window is clipped to the query's block: the wide copy of a block is
//     dropped once the block is full and the step that filled it is over).
//   - sink_tokens S: positions < S keep their wide copy for as long as the block holds them.
//   - heavy_tokens K (query-aware): ObserveQueries adds, for each new query, its attention
//     probabilities over the keys of its own block (softmax restricted to that block, from
//     the wide copy) to the block's per-token mass. Once the query at the block's last slot
//     has been observed, the K tokens with the largest mean mass (ties: the earlier token)
//     are copied in bf16 into the block's heavy-row tail (kv/kv_codec.h), where
//     attention reads them from then on (a query reads its own block from the wide copy).
//     The choice is frozen with the block, so it is shared with it.
// A block gets a wide copy when written (offset 0 starts it; a write at offset > 0 into a
// block without one seeds it from the dequantized block). When the last offset of a block is
// written, kivi2 keys are quantized from the wide copy, and the copy is released at the start
// of the next Write of that layer (the current step's queries still read it), unless the
// block holds sink positions; a block freed where no prefix hit can reach it (ReleaseBlocks)
// gives its copy back too, and a block copied into (copy-on-write: a new use) leaves the list of
// blocks to release. Only full blocks are ever shared by the prefix cache, and they
// are read exactly as written by whoever filled them; a query's own block is always private.
// So results do not depend on prefix-cache hits, on the batch, or on how a prompt is split
// into chunks (what is read wide is a function of positions only). The pool grows on demand
// (side_bytes()); with ReleaseBlocks it is bounded by one block per live sequence plus one per
// cached block that holds sink positions.
//
// Not thread-safe for concurrent writes to the same slots; the model writes each new
// token's slot once per layer per step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/kv_cache.h"
#include "core/dtype.h"
#include "kernels/params/attention_params.h"
#include "kernels/params/mla_attention_params.h"
#include "kv/kv_layout.h"

namespace pagoda {

class KVStorage : public KVCache {
 public:
  explicit KVStorage(const KVStorageShape& shape);

  const KVStorageShape& shape() const override { return shape_; }
  void* k(int64_t layer) { return k_[layer].data(); }
  void* v(int64_t layer) { return v_[layer].data(); }
  const void* k(int64_t layer) const { return k_[layer].data(); }
  const void* v(int64_t layer) const { return v_[layer].data(); }
  const KVArrayFormat& k_format(int64_t layer) const { return k_format_[layer]; }
  const KVArrayFormat& v_format(int64_t layer) const { return v_format_[layer]; }
  // Bytes of the block arrays (what KVBytesPerToken predicts: bytes() / (num_blocks x
  // block_size) equals it). The wide side pool is extra: side_bytes().
  int64_t bytes() const override;
  int64_t side_bytes() const override;

  int64_t v_width() const { return shape_.num_kv_heads * (shape_.head_dim_v > 0 ? shape_.head_dim_v : shape_.head_dim); }
  int64_t k_width() const { return shape_.num_kv_heads * shape_.head_dim; }

  // Per-tensor scales of one layer (checkpoint k_scale / v_scale): fp8 then uses them instead
  // of dynamic per-token scales; nvfp4 uses them as its per-tensor f32 scale. REQUIRES: no
  // token of the layer written yet. Values <= 0 mean "none".
  void SetTensorScales(int64_t layer, float k_scale, float v_scale) override;

  // Stores k [n, num_kv_heads, head_dim] and v [n, num_kv_heads, head_dim_v] f32 of n tokens
  // at their slots (slot = block_id * block_size + offset), converting to the cache format.
  // positions [n] (may be null: no sink tokens) are the tokens' positions in their sequences.
  void Write(int64_t layer, const float* k, const float* v, const int64_t* slots, int64_t n,
             const int32_t* positions = nullptr);
  // Reads one token's K [num_kv_heads, head_dim] or V [num_kv_heads, head_dim_v] back as f32
  // (tests, debugging): the wide copy where attention would read one for a query in the same
  // block, else the block's codes.
  void ReadSlot(int64_t layer, bool value, int64_t slot, float* out) const;
  // Query-aware policy (heavy_tokens > 0; otherwise a no-op): q [n, num_heads, head_dim] f32
  // (RoPE applied) of the n tokens just written at `slots`, with the softmax scale.
  // REQUIRES: called after Write for the same tokens, before the next Write of the layer.
  void ObserveQueries(int64_t layer, const float* q, int64_t num_heads, const int64_t* slots,
                      int64_t n, float scale);
  // Copies block src to dst in every layer (copy-on-write), wide copies included.
  void CopyBlock(int64_t src, int64_t dst);
  // Freed blocks no prefix hit can reach: their wide copies go back to the pool.
  void ReleaseBlocks(std::span<const int32_t> blocks) override;
  // Points p's caches, formats and wide-copy fields at `layer`. Valid until the next Write.
  void FillAttentionParams(int64_t layer, PagedAttentionParams* p) const;
  // MLA: points p's latent (K array) and rope (V array) caches, kv_dtype, block_size and
  // formats at `layer`. REQUIRES: a storage made for MLA (num_kv_heads 1, no side pool).
  void FillMlaAttentionParams(int64_t layer, MlaAttentionParams* p) const;

 private:
  bool UsesWide(int64_t layer) const;
  int32_t WideBlock(int64_t layer, int64_t block, int64_t offset);
  void QuantizeFullKeys(int64_t layer, int64_t block);
  void DequantizeIntoWide(int64_t layer, int64_t block, int64_t rows);
  void FreezeHeavyRows(int64_t layer, int64_t block);

  KVStorageShape shape_;
  std::vector<KVArrayFormat> k_format_, v_format_;
  std::vector<std::vector<uint8_t>> k_, v_;
  // Side pool, per layer.
  std::vector<std::vector<uint8_t>> wide_k_, wide_v_;
  std::vector<std::vector<int32_t>> wide_index_;    // [num_blocks]: wide block or -1
  std::vector<std::vector<int32_t>> wide_free_;     // released wide blocks
  std::vector<std::vector<uint8_t>> sink_block_;    // [num_blocks]: holds positions < sink_tokens
  std::vector<std::vector<uint8_t>> keys_quantized_;  // [num_blocks]: kivi2 keys hold codes
  std::vector<std::vector<int64_t>> filled_;        // blocks filled by the last Write
  // Query-aware policy, per layer: [num_blocks * block_size] attention mass and query count
  // per token, and whether the block's heavy rows are chosen.
  std::vector<std::vector<float>> mass_, mass_count_;
  std::vector<std::vector<uint8_t>> heavy_frozen_;
};

}  // namespace pagoda
