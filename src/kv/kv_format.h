// The KV cache formats in one place: how one K or V array of one layer stores its values
// (KVQuant, KVArrayFormat), the shape of a whole cache (KVStorageShape) and how
// --kv-cache-dtype and its options turn into one (ApplyKVCacheFormat). The byte layouts and the
// row codecs are in kv/kv_codec.h; bytes per token for sizing in kv/kv_layout.h. Any backend
// reads these; a backend that cannot run a format or a policy refuses it when it creates the
// cache (Backend::CreateKVCache throws Unsupported naming it).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_layout.h"

namespace pagoda {

// How one K or V array stores values. kNone: plain kv_dtype / dtype elements.
enum class KVQuant : uint8_t { kNone, kFp8E4M3, kFp8E5M2, kInt8, kInt4, kNvfp4, kKivi2 };

// The geometry and format of one K or V array of one layer.
struct KVArrayFormat {
  KVQuant quant = KVQuant::kNone;
  DType dtype = DType::kF32;  // kNone: element type (kF32, kBF16, kF16)
  int64_t block_size = 16;
  int64_t num_heads = 0;      // KV heads
  int64_t head_dim = 0;
  int64_t group = 32;         // int8/int4/kivi2 per-token groups: values per scale (<= head_dim)
  bool per_channel = false;   // kivi2 keys: quantized per channel over the block's tokens
  // fp8: > 0 is a per-tensor scale from the checkpoint (k_scale / v_scale), else dynamic
  // per-token-per-head scales. nvfp4: the per-tensor f32 scale (0 means 1).
  float tensor_scale = 0.0f;
  // Query-aware mixed precision: each block may carry bf16 copies of its heavy_rows tokens
  // with the most attention mass (kv/kv_codec.h, "heavy rows"); 0: none.
  int64_t heavy_rows = 0;
};

struct KVStorageShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;     // 0: same as head_dim
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16: wide layers and the wide side pool

  // Quantization (--kv-cache-dtype and friends); kNone: every layer stores `dtype`.
  KVQuant quant = KVQuant::kNone;
  int64_t group_size = 32;          // --kv-quant-group-size (int8, int4, kivi2 values)
  bool quantize_v = true;           // false: the V array stays `dtype` (MLA's k_pe)
  std::vector<int64_t> wide_layers; // --kv-cache-dtype-skip-layers
  int64_t sink_tokens = 0;          // --kv-sink-tokens
  int64_t recent_tokens = 0;        // --kv-recent-tokens (clipped to the query's own block)
  int64_t heavy_tokens = 0;         // --kv-heavy-tokens: bf16 copies per block (query-aware)
};

// The formats of one layer's K and V arrays in a cache of shape `s`: plain `dtype` elements
// when the cache is unquantized or the layer is in wide_layers, and for the V array when
// !quantize_v (MLA's k_pe); kivi2 keys are per channel. tensor_scale is 0 (none).
struct KVLayerFormats {
  KVArrayFormat k, v;
};
KVLayerFormats LayerKVFormats(const KVStorageShape& s, int64_t layer);

// `base` (from Model::KVShapeFor with the wide dtype, bf16 for quantized formats) with the
// quantization fields set for --kv-cache-dtype `t` and `options`. Wide formats return base.
// MLA (mla = true): the K array (latent c_kv) takes the format, the V array (k_pe) stays wide
// unless options.quantize_rope. Per-token formats only (fp8_e4m3, fp8_e5m2, int8, int4,
// nvfp4; skip-layers work); kivi2 and the side-pool policies (sink, recent and heavy
// tokens) throw Unsupported for MLA.
KVStorageShape ApplyKVCacheFormat(KVStorageShape base, KVCacheDType t, const KVQuantOptions& options,
                                  bool mla = false);
// The kernels' name for a quantized KVCacheDType (kNone for f32/bf16/f16).
KVQuant KVQuantOf(KVCacheDType t);
// The --kv-cache-dtype name of a KVQuant ("fp8_e4m3", ..., "kivi2"; "none").
const char* KVQuantName(KVQuant q);

// What a backend's KV cache can hold: the element types of wide arrays, the quantized
// formats, and the mixed-precision policies. A backend checks a shape against it when it makes
// a cache (CheckKVCacheSupport), so an unimplemented format or policy is refused up front,
// by name, not met half-way through a step.
struct KVCacheSupport {
  std::vector<DType> wide_dtypes{DType::kF32, DType::kBF16, DType::kF16};
  std::vector<KVQuant> formats{KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8,
                               KVQuant::kInt4,    KVQuant::kNvfp4,   KVQuant::kKivi2};
  bool skip_layers = true;    // --kv-cache-dtype-skip-layers
  bool sink_tokens = true;    // --kv-sink-tokens
  bool recent_tokens = true;  // --kv-recent-tokens
  bool heavy_tokens = true;   // --kv-heavy-tokens
  bool tensor_scales = true;  // checkpoint k_scale / v_scale
};
// Throws Unsupported naming `backend` and the first format or policy of `shape` that
// `support` lacks (e.g. "the cuda backend has no --kv-sink-tokens ...").
void CheckKVCacheSupport(const KVStorageShape& shape, const KVCacheSupport& support, std::string_view backend);

}  // namespace pagoda
