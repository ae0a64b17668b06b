#include "model/presets.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_layout.h"

namespace pagoda {
namespace {

TEST(PresetsTest, EveryPresetValidatesAndIsNamedAfterItsRow) {
  for (const auto& name : PresetNames()) {
    const ModelSpec s = GetPreset(name);
    EXPECT_EQ(s.name, name);
    EXPECT_NO_THROW(s.Validate()) << name;
    EXPECT_TRUE(HasPreset(name));
  }
  EXPECT_FALSE(HasPreset("gpt-5"));
  EXPECT_THROW(GetPreset("gpt-5"), Error);
}

TEST(PresetsTest, BriefTableRowsUnchanged) {
  const ModelSpec t = GetPreset("llama-tiny");
  EXPECT_EQ(t.dim, 256);
  EXPECT_EQ(t.num_layers, 4);
  EXPECT_EQ(t.num_kv_heads, 2);
  EXPECT_EQ(t.ffn_dim, 704);
  EXPECT_TRUE(t.tied_embeddings);
  const ModelSpec l = GetPreset("llama-3-8b");
  EXPECT_EQ(l.dim, 4096);
  EXPECT_EQ(l.num_layers, 32);
  EXPECT_EQ(l.num_heads, 32);
  EXPECT_EQ(l.num_kv_heads, 8);
  EXPECT_EQ(l.ffn_dim, 14336);
  EXPECT_EQ(l.vocab_size, 128256);
}

// Parameter counts against the published totals (the spec counts matrices and
// embeddings, not norms), within 0.5%; active parameters (MoE) within 5%, as published
// ("15.7B total, 2.4B activated", "671B total, 37B activated").
TEST(PresetsTest, ParameterCountsMatchPublishedSizes) {
  struct Row {
    const char* name;
    double total;
    double active;
  };
  for (const Row& r : {Row{"llama-3-8b", 8.03e9, 0}, Row{"llama-3-70b", 70.55e9, 0},
                       Row{"llama-3.1-405b", 405.8e9, 0}, Row{"qwen2.5-7b", 7.61e9, 0},
                       Row{"qwen2.5-72b", 72.7e9, 0}, Row{"mistral-7b", 7.24e9, 0},
                       Row{"deepseek-v2-lite", 15.7e9, 2.4e9},
                       Row{"deepseek-v3", 671e9, 37e9}}) {
    const ModelSpec s = GetPreset(r.name);
    EXPECT_NEAR(static_cast<double>(s.NumParameters()) / r.total, 1.0, 0.005) << r.name;
    if (r.active > 0) {
      EXPECT_NEAR(static_cast<double>(s.NumActiveParameters()) / r.active, 1.0, 0.05) << r.name;
    }
  }
}

TEST(PresetsTest, AttentionKindsAndKvBytes) {
  EXPECT_EQ(GetPreset("llama-3-70b").attention_kind(), AttentionKind::kGQA);
  EXPECT_EQ(GetPreset("llama-110m").attention_kind(), AttentionKind::kMHA);
  const ModelSpec v3 = GetPreset("deepseek-v3");
  EXPECT_EQ(v3.attention_kind(), AttentionKind::kMLA);
  EXPECT_EQ(KVBytesPerToken(v3.kv_shape(), KVCacheDType::kBF16), 70272);
  // DeepSeek-V2-Lite: 27 layers x (512 + 64) x 2 bytes.
  EXPECT_EQ(KVBytesPerToken(GetPreset("deepseek-v2-lite").kv_shape(), KVCacheDType::kBF16),
            27 * 576 * 2);
  // Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes.
  EXPECT_EQ(KVBytesPerToken(GetPreset("qwen2.5-7b").kv_shape(), KVCacheDType::kBF16),
            28 * 4 * 128 * 2 * 2);
  EXPECT_TRUE(GetPreset("qwen2.5-72b").qkv_bias);
  EXPECT_EQ(GetPreset("mistral-7b").sliding_window, 4096);
}

}  // namespace
}  // namespace pagoda
