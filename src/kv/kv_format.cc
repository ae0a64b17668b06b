#include "kv/kv_format.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace pagoda {

KVQuant KVQuantOf(KVCacheDType t) {
  switch (t) {
    case KVCacheDType::kFp8E4M3: return KVQuant::kFp8E4M3;
    case KVCacheDType::kFp8E5M2: return KVQuant::kFp8E5M2;
    case KVCacheDType::kInt8: return KVQuant::kInt8;
    case KVCacheDType::kInt4: return KVQuant::kInt4;
    case KVCacheDType::kNvfp4: return KVQuant::kNvfp4;
    case KVCacheDType::kKivi2: return KVQuant::kKivi2;
    default: return KVQuant::kNone;
  }
}

KVStorageShape ApplyKVCacheFormat(KVStorageShape s, KVCacheDType t, const KVQuantOptions& o, bool mla) {
  if (!IsQuantizedKV(t)) return s;
  if (mla) {
    PAGODA_ENSURE(t != KVCacheDType::kKivi2, ErrorCode::kUnsupported,
                  "--kv-cache-dtype kivi2 is not supported for MLA latents (its per-channel keys need "
                  "the wide side pool, which the MLA kernel does not read); use fp8, int8 or int4");
    PAGODA_ENSURE(o.sink_tokens == 0 && o.recent_tokens == 0 && o.heavy_tokens == 0,
                  ErrorCode::kUnsupported,
                  "--kv-sink-tokens, --kv-recent-tokens and --kv-heavy-tokens are not supported for "
                  "MLA latents (they need the wide side pool, which the MLA kernel does not read)");
  }
  s.quant = KVQuantOf(t);
  s.group_size = o.group_size;
  s.quantize_v = !mla || o.quantize_rope;
  s.wide_layers = o.skip_layers;
  s.sink_tokens = o.sink_tokens;
  s.recent_tokens = o.recent_tokens;
  s.heavy_tokens = o.heavy_tokens;
  return s;
}

KVLayerFormats LayerKVFormats(const KVStorageShape& s, int64_t layer) {
  const bool wide = s.quant == KVQuant::kNone ||
                    std::find(s.wide_layers.begin(), s.wide_layers.end(), layer) != s.wide_layers.end();
  KVArrayFormat f;
  f.quant = wide ? KVQuant::kNone : s.quant;
  f.dtype = s.dtype;
  f.block_size = s.block_size;
  f.num_heads = s.num_kv_heads;
  f.head_dim = s.head_dim;
  f.group = s.group_size;
  f.heavy_rows = wide ? 0 : s.heavy_tokens;
  KVLayerFormats out{f, f};
  out.k.per_channel = f.quant == KVQuant::kKivi2;
  out.v.head_dim = s.head_dim_v > 0 ? s.head_dim_v : s.head_dim;
  if (!s.quantize_v) out.v.quant = KVQuant::kNone;
  return out;
}

const char* KVQuantName(KVQuant q) {
  switch (q) {
    case KVQuant::kNone: return "none";
    case KVQuant::kFp8E4M3: return "fp8_e4m3";
    case KVQuant::kFp8E5M2: return "fp8_e5m2";
    case KVQuant::kInt8: return "int8";
    case KVQuant::kInt4: return "int4";
    case KVQuant::kNvfp4: return "nvfp4";
    case KVQuant::kKivi2: return "kivi2";
  }
  return "?";
}

void CheckKVCacheSupport(const KVStorageShape& s, const KVCacheSupport& support, std::string_view backend) {
  auto refuse = [&](const std::string& what) {
    ThrowUnsupported("the " + std::string(backend) + " backend's KV cache has no " + what);
  };
  if (std::find(support.wide_dtypes.begin(), support.wide_dtypes.end(), s.dtype) == support.wide_dtypes.end()) {
    refuse(std::string(DTypeName(s.dtype)) + " elements (--kv-cache-dtype)");
  }
  if (s.quant != KVQuant::kNone &&
      std::find(support.formats.begin(), support.formats.end(), s.quant) == support.formats.end()) {
    refuse(std::string("--kv-cache-dtype ") + KVQuantName(s.quant));
  }
  if (!s.wide_layers.empty() && !support.skip_layers) refuse("--kv-cache-dtype-skip-layers");
  if (s.sink_tokens > 0 && !support.sink_tokens) refuse("--kv-sink-tokens");
  if (s.recent_tokens > 0 && !support.recent_tokens) refuse("--kv-recent-tokens");
  if (s.heavy_tokens > 0 && !support.heavy_tokens) refuse("--kv-heavy-tokens");
}

}  // namespace pagoda
