#include "kv/kv_format.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace pagoda {
namespace {

std::string Refusal(const KVStorageShape& shape, const KVCacheSupport& support) {
  try {
    CheckKVCacheSupport(shape, support, "cuda");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    return e.what();
  }
  return "";
}

KVStorageShape Quantized(KVCacheDType t, const KVQuantOptions& o = {}) {
  KVStorageShape base;
  base.num_layers = 4;
  base.num_blocks = 8;
  base.num_kv_heads = 2;
  base.head_dim = 64;
  base.dtype = DType::kBF16;
  return ApplyKVCacheFormat(base, t, o);
}

TEST(KVFormatTest, FullSupportAcceptsEveryFormatAndPolicy) {
  KVQuantOptions o;
  o.skip_layers = {0};
  o.sink_tokens = 4;
  o.recent_tokens = 8;
  o.heavy_tokens = 2;
  for (KVCacheDType t : {KVCacheDType::kFp8E4M3, KVCacheDType::kFp8E5M2, KVCacheDType::kInt8,
                         KVCacheDType::kInt4, KVCacheDType::kNvfp4, KVCacheDType::kKivi2}) {
    EXPECT_EQ(Refusal(Quantized(t, o), KVCacheSupport{}), "") << KVCacheDTypeName(t);
  }
}

TEST(KVFormatTest, AMissingFormatIsRefusedByNameAndBackend) {
  KVCacheSupport fp8_only;
  fp8_only.formats = {KVQuant::kFp8E4M3};
  EXPECT_EQ(Refusal(Quantized(KVCacheDType::kFp8E4M3), fp8_only), "");
  const std::string why = Refusal(Quantized(KVCacheDType::kKivi2), fp8_only);
  EXPECT_NE(why.find("cuda backend"), std::string::npos) << why;
  EXPECT_NE(why.find("--kv-cache-dtype kivi2"), std::string::npos) << why;
}

TEST(KVFormatTest, EachMissingPolicyIsRefusedByItsFlag) {
  struct Case {
    const char* flag;
    bool KVCacheSupport::*field;
    void (*set)(KVQuantOptions*);
  };
  const Case cases[] = {
      {"--kv-cache-dtype-skip-layers", &KVCacheSupport::skip_layers, [](KVQuantOptions* o) { o->skip_layers = {1}; }},
      {"--kv-sink-tokens", &KVCacheSupport::sink_tokens, [](KVQuantOptions* o) { o->sink_tokens = 4; }},
      {"--kv-recent-tokens", &KVCacheSupport::recent_tokens, [](KVQuantOptions* o) { o->recent_tokens = 8; }},
      {"--kv-heavy-tokens", &KVCacheSupport::heavy_tokens, [](KVQuantOptions* o) { o->heavy_tokens = 2; }},
  };
  for (const Case& c : cases) {
    KVQuantOptions o;
    c.set(&o);
    KVCacheSupport support;
    support.*c.field = false;
    const std::string why = Refusal(Quantized(KVCacheDType::kInt4, o), support);
    EXPECT_NE(why.find(c.flag), std::string::npos) << c.flag << ": " << why;
    EXPECT_EQ(Refusal(Quantized(KVCacheDType::kInt4), support), "") << c.flag << " refused without being asked for";
  }
}

TEST(KVFormatTest, AMissingElementTypeIsRefused) {
  KVCacheSupport bf16_only;
  bf16_only.wide_dtypes = {DType::kBF16};
  KVStorageShape f32;
  f32.dtype = DType::kF32;
  EXPECT_NE(Refusal(f32, bf16_only).find("f32"), std::string::npos) << Refusal(f32, bf16_only);
}

// The per-layer formats both backends store: skipped layers and an unquantized cache are plain
// dtype rows; kivi2 keys are per channel, its values per token; MLA's k_pe (quantize_v false)
// stays plain; V takes head_dim_v.
TEST(KVFormatTest, LayerFormatsFollowTheShape) {
  KVQuantOptions o;
  o.skip_layers = {0, 3};
  o.group_size = 16;
  const KVStorageShape s = Quantized(KVCacheDType::kInt8, o);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const KVLayerFormats f = LayerKVFormats(s, l);
    const bool wide = l == 0 || l == 3;
    EXPECT_EQ(f.k.quant, wide ? KVQuant::kNone : KVQuant::kInt8) << "layer " << l;
    EXPECT_EQ(f.v.quant, f.k.quant) << "layer " << l;
    EXPECT_EQ(f.k.dtype, DType::kBF16);
    EXPECT_EQ(f.k.group, 16);
    EXPECT_EQ(f.k.num_heads, 2);
    EXPECT_EQ(f.k.head_dim, 64);
    EXPECT_FALSE(f.k.per_channel);
  }
  const KVStorageShape kivi = Quantized(KVCacheDType::kKivi2);
  EXPECT_TRUE(LayerKVFormats(kivi, 1).k.per_channel);
  EXPECT_FALSE(LayerKVFormats(kivi, 1).v.per_channel);

  KVStorageShape mla = Quantized(KVCacheDType::kBF16);  // unquantized base
  mla.num_kv_heads = 1;
  mla.head_dim = 512;
  mla.head_dim_v = 64;
  mla = ApplyKVCacheFormat(mla, KVCacheDType::kFp8E4M3, {}, /*mla=*/true);
  const KVLayerFormats m = LayerKVFormats(mla, 2);
  EXPECT_EQ(m.k.quant, KVQuant::kFp8E4M3);
  EXPECT_EQ(m.k.head_dim, 512);
  EXPECT_EQ(m.v.quant, KVQuant::kNone);  // k_pe stays bf16 (RoPE-aware)
  EXPECT_EQ(m.v.head_dim, 64);

  const KVLayerFormats plain = LayerKVFormats(Quantized(KVCacheDType::kBF16), 1);
  EXPECT_EQ(plain.k.quant, KVQuant::kNone);
  EXPECT_EQ(plain.v.quant, KVQuant::kNone);
}

}  // namespace
}  // namespace pagoda
