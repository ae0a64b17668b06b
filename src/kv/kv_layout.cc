#include "kv/kv_layout.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace pagoda {

KVCacheDType ParseKVCacheDType(std::string_view name, KVCacheDType model_default) {
  if (name == "auto") return model_default;
  if (name == "f32" || name == "float32") return KVCacheDType::kF32;
  if (name == "bf16" || name == "bfloat16") return KVCacheDType::kBF16;
  if (name == "fp16" || name == "f16" || name == "float16") return KVCacheDType::kF16;
  if (name == "fp8" || name == "fp8_e4m3") return KVCacheDType::kFp8E4M3;
  if (name == "fp8_e5m2") return KVCacheDType::kFp8E5M2;
  if (name == "int8") return KVCacheDType::kInt8;
  if (name == "int4") return KVCacheDType::kInt4;
  if (name == "nvfp4") return KVCacheDType::kNvfp4;
  if (name == "kivi2") return KVCacheDType::kKivi2;
  ThrowInvalidArgument("--kv-cache-dtype: unknown value '" + std::string(name) +
                       "' (expected auto, bf16, fp16, f32, fp8, fp8_e4m3, fp8_e5m2, int8, int4, "
                       "nvfp4 or kivi2)");
}

std::string_view KVCacheDTypeName(KVCacheDType t) {
  switch (t) {
    case KVCacheDType::kF32: return "f32";
    case KVCacheDType::kBF16: return "bf16";
    case KVCacheDType::kF16: return "fp16";
    case KVCacheDType::kFp8E4M3: return "fp8_e4m3";
    case KVCacheDType::kFp8E5M2: return "fp8_e5m2";
    case KVCacheDType::kInt8: return "int8";
    case KVCacheDType::kInt4: return "int4";
    case KVCacheDType::kNvfp4: return "nvfp4";
    case KVCacheDType::kKivi2: return "kivi2";
  }
  return "?";
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes for one vector of d values stored per token (a K or V head, or an MLA latent).
// kivi2 here is the per-token (values) layout; keys use KiviKeyBytes.
int64_t VectorBytes(int64_t d, KVCacheDType t, int64_t group) {
  if (d == 0) return 0;
  const int64_t g = std::min(group, d);
  switch (t) {
    case KVCacheDType::kF32: return 4 * d;
    case KVCacheDType::kBF16:
    case KVCacheDType::kF16: return 2 * d;
    case KVCacheDType::kFp8E4M3:
    case KVCacheDType::kFp8E5M2: return d + 4;
    case KVCacheDType::kInt8: return d + 2 * CeilDiv(d, g);
    case KVCacheDType::kInt4: return CeilDiv(d, 2) + 2 * CeilDiv(d, g);
    case KVCacheDType::kNvfp4: return CeilDiv(d, 2) + CeilDiv(d, 16);
    case KVCacheDType::kKivi2: return CeilDiv(d, 4) + 4 * CeilDiv(d, g);
  }
  return 0;
}

// kivi2 keys: per block, d (scale, min) f16 pairs + B x ceil(d/4) code bytes, per token.
int64_t KiviKeyBytes(int64_t d, int64_t block_size) {
  if (d == 0) return 0;
  return CeilDiv(4 * d + block_size * CeilDiv(d, 4), block_size);
}

}  // namespace

bool IsQuantizedKV(KVCacheDType t) {
  return t != KVCacheDType::kF32 && t != KVCacheDType::kBF16 && t != KVCacheDType::kF16;
}

int64_t KVBytesPerTokenPerLayer(const KVShape& s, KVCacheDType dtype, const KVQuantOptions& o) {
  PAGODA_CHECK(o.group_size > 0 && o.block_size > 0) << "group and block size must be positive";
  // Query-aware heavy rows (quantized formats, not MLA): a per-block tail in each array.
  const auto heavy = [&](int64_t d) {
    if (o.heavy_tokens <= 0 || !IsQuantizedKV(dtype) || s.mla || d == 0) return int64_t{0};
    return CeilDiv(1 + o.heavy_tokens + 2 * o.heavy_tokens * s.num_kv_heads * d, o.block_size);
  };
  if (dtype == KVCacheDType::kKivi2 && !s.mla) {
    return s.num_kv_heads * (KiviKeyBytes(s.head_dim_k, o.block_size) +
                             VectorBytes(s.head_dim_v, dtype, o.group_size)) +
           heavy(s.head_dim_k) + heavy(s.head_dim_v);
  }
  if (s.mla) {
    const KVCacheDType rope_dtype =
        (o.quantize_rope || dtype == KVCacheDType::kF32) ? dtype : KVCacheDType::kBF16;
    return VectorBytes(s.head_dim_k, dtype, o.group_size) +
           VectorBytes(s.rope_dim, rope_dtype, o.group_size);
  }
  return s.num_kv_heads * (VectorBytes(s.head_dim_k, dtype, o.group_size) +
                           VectorBytes(s.head_dim_v, dtype, o.group_size)) +
         heavy(s.head_dim_k) + heavy(s.head_dim_v);
}

int64_t KVBytesPerToken(const KVShape& s, KVCacheDType dtype, const KVQuantOptions& o) {
  int64_t skipped = 0;
  if (IsQuantizedKV(dtype)) {
    for (int64_t l = 0; l < s.num_layers; ++l) {
      if (std::find(o.skip_layers.begin(), o.skip_layers.end(), l) != o.skip_layers.end()) ++skipped;
    }
  }
  return (s.num_layers - skipped) * KVBytesPerTokenPerLayer(s, dtype, o) +
         skipped * KVBytesPerTokenPerLayer(s, KVCacheDType::kBF16, o);
}

int64_t KVSidePoolBytesPerSequence(const KVShape& s, KVCacheDType dtype, const KVQuantOptions& o) {
  if (!IsQuantizedKV(dtype) || s.mla) return 0;
  const int64_t blocks = (dtype == KVCacheDType::kKivi2 || o.recent_tokens > 0 ? 1 : 0) +
                         CeilDiv(std::max<int64_t>(o.sink_tokens, 0), o.block_size);
  int64_t layers = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    layers += std::find(o.skip_layers.begin(), o.skip_layers.end(), l) == o.skip_layers.end();
  }
  return blocks * layers * o.block_size * s.num_kv_heads * (s.head_dim_k + s.head_dim_v) * 2;
}

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib < 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", mib);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", mib / 1024.0);
  }
  return buf;
}

}  // namespace pagoda

namespace pagoda {
int64_t NumKVBlocks(int64_t memory_bytes, int64_t block_size, int64_t bytes_per_token) {
  PAGODA_CHECK(block_size > 0 && bytes_per_token > 0) << "bad block geometry";
  if (memory_bytes <= 0) return 0;
  return memory_bytes / (block_size * bytes_per_token);
}
}  // namespace pagoda
