#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "model/presets.h"

namespace pagoda {
namespace {

std::string HfFixture(const std::string& name) {
  std::string dir = std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
  if (const char* env = std::getenv("PAGODA_FIXTURES"); env != nullptr && *env != '\0') dir = env;
  std::string path = dir + "/models/hf/" + name + "/config.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) ADD_FAILURE() << "fixture missing: " << path;
  return path;
}

// Runs `fn`, expects a pagoda::Error with `code` whose message contains every `parts`.
template <typename Fn>
void ExpectError(Fn fn, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "'" << p << "' not in: " << e.what();
  }
}

TEST(HfConfigTest, LlamaGqaWithLlama3RopeParameters) {
  const ModelSpec s = SpecFromHfConfigFile(HfFixture("llama-gqa"));
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.dim, 256);
  EXPECT_EQ(s.num_layers, 4);
  EXPECT_EQ(s.num_heads, 4);
  EXPECT_EQ(s.num_kv_heads, 2);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.ffn_dim, 704);
  EXPECT_EQ(s.vocab_size, 32000);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.norm_eps, 1e-5);
  EXPECT_EQ(s.max_position, 4096);
  EXPECT_EQ(s.attention_kind(), AttentionKind::kGQA);
  EXPECT_FALSE(s.rope.interleaved);
  EXPECT_EQ(s.rope.dim, 64);
  EXPECT_DOUBLE_EQ(s.rope.theta, 500000.0);
  EXPECT_EQ(s.rope.scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(s.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(s.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.rope.high_freq_factor, 4.0);
  EXPECT_EQ(s.rope.original_max_position, 512);
  EXPECT_EQ(s.weight_dtype, DType::kBF16);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_FALSE(s.is_mla());
}

TEST(HfConfigTest, LlamaMhaAndMqa) {
  const ModelSpec mha = SpecFromHfConfigFile(HfFixture("llama-mha"));
  EXPECT_EQ(mha.attention_kind(), AttentionKind::kMHA);
  EXPECT_EQ(mha.num_layers, 3);
  EXPECT_FALSE(mha.tied_embeddings);
  EXPECT_EQ(mha.rope.scaling, RopeScaling::kNone);
  EXPECT_DOUBLE_EQ(mha.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(mha.norm_eps, 1e-6);
  const ModelSpec mqa = SpecFromHfConfigFile(HfFixture("llama-mqa"));
  EXPECT_EQ(mqa.attention_kind(), AttentionKind::kMQA);
  EXPECT_EQ(mqa.num_heads, 8);
  EXPECT_EQ(mqa.num_kv_heads, 1);
  EXPECT_EQ(mqa.head_dim, 32);
  EXPECT_EQ(mqa.rope.dim, 32);
}

TEST(HfConfigTest, Qwen2HasBiasesAndNoWindow) {
  const ModelSpec s = SpecFromHfConfigFile(HfFixture("qwen2-bias"));
  EXPECT_EQ(s.architecture, "qwen2");
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.rope.theta, 1e6);
  EXPECT_EQ(s.sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(s.head_dim, 64);        // no head_dim key: hidden / heads
  EXPECT_FALSE(s.rope.interleaved);
}

TEST(HfConfigTest, MistralSlidingWindow) {
  const ModelSpec s = SpecFromHfConfigFile(HfFixture("mistral-swa"));
  EXPECT_EQ(s.architecture, "mistral");
  EXPECT_EQ(s.sliding_window, 24);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_FALSE(s.rope.interleaved);
}

TEST(HfConfigTest, DeepseekV2MlaDenseRotatesInterleavedPairs) {
  const ModelSpec s = SpecFromHfConfigFile(HfFixture("deepseek-v2-mla"));
  EXPECT_EQ(s.architecture, "deepseek_v2");
  ASSERT_TRUE(s.is_mla());
  EXPECT_EQ(s.attention_kind(), AttentionKind::kMLA);
  EXPECT_EQ(s.mla.q_lora_rank, 0);  // null
  EXPECT_EQ(s.mla.kv_lora_rank, 64);
  EXPECT_EQ(s.mla.qk_nope_head_dim, 32);
  EXPECT_EQ(s.mla.qk_rope_head_dim, 16);
  EXPECT_EQ(s.mla.v_head_dim, 32);
  EXPECT_EQ(s.head_dim, 48);
  EXPECT_EQ(s.rope.dim, 16);
  EXPECT_TRUE(s.rope.interleaved);
  EXPECT_EQ(s.moe.num_experts, 0);  // first_k_dense_replace 3 = every layer dense
  EXPECT_EQ(s.ffn_dim, 512);
  const KVShape kv = s.kv_shape();
  EXPECT_TRUE(kv.mla);
  EXPECT_EQ(kv.head_dim_k, 64);
  EXPECT_EQ(kv.rope_dim, 16);
}

TEST(HfConfigTest, DeepseekV3MlaMoe) {
  const ModelSpec s = SpecFromHfConfigFile(HfFixture("deepseek-v3-moe"));
  EXPECT_EQ(s.architecture, "deepseek_v3");
  EXPECT_EQ(s.mla.q_lora_rank, 96);
  EXPECT_EQ(s.mla.kv_lora_rank, 64);
  EXPECT_TRUE(s.rope.interleaved);  // rope_interleave: true
  EXPECT_EQ(s.moe.num_experts, 8);
  EXPECT_EQ(s.moe.num_experts_per_tok, 2);
  EXPECT_EQ(s.moe.num_shared_experts, 1);
  EXPECT_EQ(s.moe.expert_ffn_dim, 64);
  EXPECT_EQ(s.moe.first_k_dense_replace, 1);
  EXPECT_EQ(s.moe.n_group, 2);
  EXPECT_EQ(s.moe.topk_group, 1);
  EXPECT_TRUE(s.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(s.moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(s.moe.scoring_func, "sigmoid");
  EXPECT_EQ(s.moe.topk_method, "noaux_tc");
}

// The published DeepSeek-V3 config.json (transformers 4 keys, YaRN in rope_scaling with
// the old "type" key, no rope_interleave).
constexpr const char* kDeepseekV3Published = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 2048,
  "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_group": 4,
  "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128,
  "vocab_size": 129280, "first_k_dense_replace": 3, "tie_word_embeddings": false
})";

TEST(HfConfigTest, PublishedDeepseekV3Transformers4Keys) {
  const ModelSpec s = SpecFromHfConfig(kDeepseekV3Published, "dsv3/config.json");
  EXPECT_EQ(s.rope.scaling, RopeScaling::kYarn);
  EXPECT_DOUBLE_EQ(s.rope.factor, 40.0);
  EXPECT_EQ(s.rope.original_max_position, 4096);
  EXPECT_DOUBLE_EQ(s.rope.mscale_all_dim, 1.0);
  EXPECT_DOUBLE_EQ(s.rope.beta_fast, 32.0);
  EXPECT_TRUE(s.rope.interleaved);  // rope_interleave absent: default true
  EXPECT_EQ(s.max_position, 163840);
  EXPECT_EQ(KVBytesPerToken(s.kv_shape(), KVCacheDType::kBF16), 70272);
  // Same shape as the preset.
  const ModelSpec p = GetPreset("deepseek-v3");
  EXPECT_EQ(s.NumParameters(), p.NumParameters());
  EXPECT_EQ(s.NumActiveParameters(), p.NumActiveParameters());
}

TEST(HfConfigTest, Transformers4LlamaKeysAndRopeInterleaveFalse) {
  const ModelSpec s = SpecFromHfConfig(R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "torch_dtype": "float16"})",
                                       "l3/config.json");
  EXPECT_EQ(s.weight_dtype, DType::kF16);
  EXPECT_EQ(s.rope.original_max_position, 8192);
  EXPECT_EQ(KVBytesPerToken(s.kv_shape(), KVCacheDType::kBF16), 131072);
  std::string v3 = kDeepseekV3Published;
  v3.insert(v3.rfind('}'), R"(, "rope_interleave": false)");
  EXPECT_FALSE(SpecFromHfConfig(v3, "x").rope.interleaved);
}

TEST(HfConfigTest, DefaultsKvHeadsAndHeadDim) {
  const ModelSpec s = SpecFromHfConfig(R"({"model_type": "llama", "hidden_size": 512,
    "intermediate_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2,
    "vocab_size": 100, "rope_scaling": null})",
                                       "cfg");
  EXPECT_EQ(s.num_kv_heads, 8);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.rope.scaling, RopeScaling::kNone);
}

TEST(HfConfigTest, MalformedInputsNameFileAndField) {
  const std::string good = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
    "vocab_size": 100})";
  EXPECT_NO_THROW(SpecFromHfConfig(good, "c.json"));
  auto with = [&](const std::string& extra) {
    return good.substr(0, good.rfind('}')) + ", " + extra + "}";
  };
  ExpectError([&] { SpecFromHfConfig(good.substr(0, 40), "trunc.json"); },
              ErrorCode::kCorruptData, {"trunc.json", "JSON"});
  ExpectError([&] { SpecFromHfConfig("", "empty.json"); }, ErrorCode::kCorruptData,
              {"empty.json"});
  ExpectError([&] { SpecFromHfConfig("[1, 2]", "arr.json"); }, ErrorCode::kCorruptData,
              {"arr.json", "object"});
  ExpectError([&] { SpecFromHfConfig(with(R"("num_hidden_layers": "32")"), "c.json"); },
              ErrorCode::kCorruptData, {"c.json", "num_hidden_layers", "integer"});
  ExpectError([&] { SpecFromHfConfig(with(R"("rms_norm_eps": true)"), "c.json"); },
              ErrorCode::kCorruptData, {"rms_norm_eps", "number"});
  ExpectError([&] { SpecFromHfConfig(with(R"("tie_word_embeddings": 1)"), "c.json"); },
              ErrorCode::kCorruptData, {"tie_word_embeddings"});
  ExpectError([&] { SpecFromHfConfig(with(R"("rope_scaling": [8])"), "c.json"); },
              ErrorCode::kCorruptData, {"rope_scaling", "object"});
  ExpectError(
      [&] { SpecFromHfConfig(with(R"("rope_scaling": {"rope_type": "llama3", "factor": 8})"), "c.json"); },
      ErrorCode::kCorruptData, {"rope_scaling.low_freq_factor", "missing"});
  ExpectError(
      [&] { SpecFromHfConfig(with(R"("rope_parameters": {"rope_type": "dynamic", "factor": 2})"), "c.json"); },
      ErrorCode::kUnsupported, {"rope_parameters.rope_type", "dynamic"});
  ExpectError([&] { SpecFromHfConfig(with(R"("hidden_act": "gelu")"), "c.json"); },
              ErrorCode::kUnsupported, {"hidden_act"});
  ExpectError([&] { SpecFromHfConfig(with(R"("num_key_value_heads": 3)"), "c.json"); },
              ErrorCode::kInvalidArgument, {"c.json", "key/value heads"});
  ExpectError([&] { SpecFromHfConfig(with(R"("dtype": "int8")"), "c.json"); },
              ErrorCode::kUnsupported, {"dtype"});
  // Missing fields.
  ExpectError([&] { SpecFromHfConfig(R"({"architectures": ["LlamaForCausalLM"]})", "m.json"); },
              ErrorCode::kCorruptData, {"m.json", "vocab_size", "missing"});
  ExpectError([&] { SpecFromHfConfig(R"({"hidden_size": 4})", "m.json"); },
              ErrorCode::kCorruptData, {"architectures", "missing"});
  ExpectError([&] { SpecFromHfConfig(R"({"architectures": ["GPT2LMHeadModel"]})", "g.json"); },
              ErrorCode::kUnsupported, {"g.json", "GPT2LMHeadModel"});
  ExpectError([&] { SpecFromHfConfig(R"({"architectures": "LlamaForCausalLM"})", "g.json"); },
              ErrorCode::kCorruptData, {"architectures", "list"});
  std::string v3 = kDeepseekV3Published;
  const auto pos = v3.find(R"("kv_lora_rank": 512, )");
  v3.erase(pos, std::string(R"("kv_lora_rank": 512, )").size());
  ExpectError([&] { SpecFromHfConfig(v3, "d.json"); }, ErrorCode::kCorruptData,
              {"d.json", "kv_lora_rank", "missing"});
  ExpectError([&] { SpecFromHfConfigFile("/nonexistent/dir"); }, ErrorCode::kNotFound,
              {"/nonexistent/dir"});
}

}  // namespace
}  // namespace pagoda
