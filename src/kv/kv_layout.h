// What one token costs in the KV cache. ONE function, KVBytesPerToken, gives it;
// the block allocator, the planner and the metrics all call it, so their figures agree.
//
// Formats (per token, per layer, per KV head unless MLA), exactly what the CPU cache
// allocates (backend/kv_storage.h; byte layouts in kv/kv_codec.h), d = head dim,
// ng = ceil(d / min(G, d)), B = block size:
//   f32 / bf16 / f16:     (d_k + d_v) x 4 / 2 / 2 bytes
//   fp8_e4m3 / fp8_e5m2:  d bytes + one f32 scale per token per head, for K and for V
//   int8:                 d bytes + ng f16 scales
//   int4:                 ceil(d/2) bytes + ng f16 scales
//   nvfp4:                ceil(d/2) bytes + ceil(d/16) e4m3 scales (the per-tensor f32 scale
//                         is per layer, not per token)
//   kivi2:                values: ceil(d/4) bytes + ng x (f16 scale, f16 min), per token;
//                         keys: per block, d x (f16 scale, f16 min) per head over the block's
//                         B tokens + ceil(d/4) bytes per token, padded to whole bytes per
//                         token: ceil((4d + B ceil(d/4)) / B) per token and head
// heavy_tokens K adds per block and array [valid u8][K offsets][K x heads x d bf16] padded
// to whole bytes per token: ceil((1 + K + 2 K heads d) / B) per token, for K and for V.
// Layers in skip_layers count as bf16. The wide side pool of sink/recent/kivi2-residual
// tokens is not per token (bounded per sequence): KVSidePoolBytesPerSequence.
// MLA caches the latent c_kv (kv_lora_rank) in the format and k_pe (qk_rope_head_dim)
// in bf16 (RoPE-aware: the rotary part stays wide), unless quantize_rope is set.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

enum class KVCacheDType {
  kF32,
  kBF16,
  kF16,
  kFp8E4M3,
  kFp8E5M2,
  kInt8,
  kInt4,
  kNvfp4,
  kKivi2,
};

// "auto" resolves to `model_default`; "fp8" means fp8_e4m3. Throws InvalidArgument.
KVCacheDType ParseKVCacheDType(std::string_view name, KVCacheDType model_default);
// Name as stored, e.g. "fp8_e4m3" for fp8.
std::string_view KVCacheDTypeName(KVCacheDType t);

// The per-token, per-layer shape of what a model caches.
struct KVShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;  // 1 for MLA
  int64_t head_dim_k = 0;    // MLA: kv_lora_rank (the latent)
  int64_t head_dim_v = 0;    // MLA: 0 (values come from the latent)
  int64_t rope_dim = 0;      // MLA: qk_rope_head_dim (k_pe); 0 otherwise
  bool mla = false;
};

struct KVQuantOptions {
  int64_t group_size = 32;     // --kv-quant-group-size (int8, int4, kivi2)
  bool quantize_rope = false;  // MLA: quantize k_pe too (for measuring what keeping it wide buys)
  int64_t block_size = 16;     // kivi2 keys are quantized per channel over a block's tokens
  std::vector<int64_t> skip_layers;  // --kv-cache-dtype-skip-layers: these layers stay bf16
  int64_t sink_tokens = 0;     // --kv-sink-tokens: first tokens kept bf16 (side pool)
  int64_t recent_tokens = 0;   // --kv-recent-tokens: recent tokens kept bf16 (side pool)
  int64_t heavy_tokens = 0;    // --kv-heavy-tokens: per block, bf16 copies of the tokens with
                               // the most attention mass (in the block: counted per token)
};

// True for the formats that store codes and scales (fp8 and narrower).
bool IsQuantizedKV(KVCacheDType t);

// Bytes one token occupies in one layer.
int64_t KVBytesPerTokenPerLayer(const KVShape& shape, KVCacheDType dtype,
                                const KVQuantOptions& options = {});
// Bytes one token occupies across all layers. The single source of truth.
int64_t KVBytesPerToken(const KVShape& shape, KVCacheDType dtype,
                        const KVQuantOptions& options = {});

// The side pool (backend/kv_storage.h, backend/wide_pool.h): bf16 copies of whole blocks of the
// quantized layers, for kivi2's residual and --kv-sink-tokens / --kv-recent-tokens. What one
// live sequence holds there: its tail block (kivi2, recent tokens) and the blocks that hold its
// sink positions, B x heads x (dk + dv) x 2 bytes a block and layer. 0 when no policy needs it
// (and for MLA, which refuses them). Cached blocks that hold sink positions keep their copies
// after their sequence ends: more than this, bounded by the prefix cache.
int64_t KVSidePoolBytesPerSequence(const KVShape& shape, KVCacheDType dtype, const KVQuantOptions& options = {});

// "64.0 MiB" below 1 GiB, else "1.50 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace pagoda

namespace pagoda {
// Blocks that fit in `memory_bytes`: floor(memory / (block_size x bytes_per_token)).
// The engine's allocator and the planner both size the pool with this.
int64_t NumKVBlocks(int64_t memory_bytes, int64_t block_size, int64_t bytes_per_token);
}  // namespace pagoda
