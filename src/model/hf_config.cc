// HF config.json -> ModelSpec. The contract (keys, defaults, RoPE conventions) is in
// hf_config.h.
#include "model/hf_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// Reads typed fields of one JSON object; every error names the file and the field path.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : j_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // null counts as absent: transformers writes "q_lora_rank": null.
  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t Int(const char* key) const {
    const json& v = Require(key);
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
    // 4096.0 is still a count; 4096.5 is not.
    if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
    WrongType(key, "an integer", v);
  }
  int64_t Int(const char* key, int64_t fallback) const { return Has(key) ? Int(key) : fallback; }

  double Double(const char* key) const {
    const json& v = Require(key);
    if (!v.is_number()) WrongType(key, "a number", v);
    return v.get<double>();
  }
  double Double(const char* key, double fallback) const {
    return Has(key) ? Double(key) : fallback;
  }

  bool Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) WrongType(key, "true or false", v);
    return v.get<bool>();
  }

  std::string String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) WrongType(key, "a string", v);
    return v.get<std::string>();
  }

  // A nested object (rope_scaling, rope_parameters); null when absent.
  const json* Object(const char* key) const {
    if (!Has(key)) return nullptr;
    const json& v = j_.at(key);
    if (!v.is_object()) WrongType(key, "an object", v);
    return &v;
  }

  std::string Path(const char* key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }

  [[noreturn]] void Fail(ErrorCode code, const char* key, const std::string& what) const {
    ThrowError(code, source_ + ": field '" + Path(key) + "' " + what);
  }

 private:
  const json& Require(const char* key) const {
    if (!Has(key)) Fail(ErrorCode::kCorruptData, key, "is missing");
    return j_.at(key);
  }
  [[noreturn]] void WrongType(const char* key, const char* expected, const json& v) const {
    Fail(ErrorCode::kCorruptData, key,
         std::string("must be ") + expected + " (got " + v.type_name() + " " + v.dump() + ")");
  }

  const json& j_;
  std::string source_;
  std::string prefix_;
};

std::string Architecture(const json& root, const Fields& f) {
  std::string name;
  if (f.Has("architectures")) {
    const json& a = root.at("architectures");
    if (!a.is_array() || a.empty() || !a.at(0).is_string()) {
      f.Fail(ErrorCode::kCorruptData, "architectures", "must be a non-empty list of strings");
    }
    name = a.at(0).get<std::string>();
  } else if (f.Has("model_type")) {
    name = f.String("model_type", "");
  } else {
    f.Fail(ErrorCode::kCorruptData, "architectures", "is missing (and so is 'model_type')");
  }
  if (name == "LlamaForCausalLM" || name == "llama") return "llama";
  if (name == "MistralForCausalLM" || name == "mistral") return "mistral";
  if (name == "Qwen2ForCausalLM" || name == "qwen2") return "qwen2";
  if (name == "DeepseekV2ForCausalLM" || name == "deepseek_v2") return "deepseek_v2";
  if (name == "DeepseekV3ForCausalLM" || name == "deepseek_v3") return "deepseek_v3";
  f.Fail(ErrorCode::kUnsupported, f.Has("architectures") ? "architectures" : "model_type",
         "names an unsupported architecture '" + name +
             "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
             "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)");
}

DType WeightDType(const Fields& f) {
  // transformers 5 writes "dtype", transformers 4 "torch_dtype".
  const char* key = f.Has("dtype") ? "dtype" : "torch_dtype";
  const std::string name = f.String(key, "bfloat16");
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "float32") return DType::kF32;
  f.Fail(ErrorCode::kUnsupported, key,
         "is '" + name + "' (expected bfloat16, float16 or float32)");
}

// RoPE: transformers 5 keeps everything in rope_parameters; transformers 4 has a top-level
// rope_theta and an optional rope_scaling object ("type" in older files, "rope_type" now).
void ReadRope(const json& root, const Fields& f, ModelSpec& s) {
  const char* key = f.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* params = f.Object(key);
  s.rope.theta = f.Double("rope_theta", 10000.0);
  if (params == nullptr) return;
  const Fields p(*params, f.source(), std::string(key) + ".");
  s.rope.theta = p.Double("rope_theta", s.rope.theta);
  const char* type_key = p.Has("rope_type") ? "rope_type" : "type";
  const std::string type = p.String(type_key, "default");
  if (type == "default") return;
  if (type == "linear") {
    s.rope.scaling = RopeScaling::kLinear;
    s.rope.factor = p.Double("factor");
  } else if (type == "llama3") {
    s.rope.scaling = RopeScaling::kLlama3;
    s.rope.factor = p.Double("factor");
    s.rope.low_freq_factor = p.Double("low_freq_factor");
    s.rope.high_freq_factor = p.Double("high_freq_factor");
    s.rope.original_max_position = p.Int("original_max_position_embeddings");
  } else if (type == "yarn") {
    s.rope.scaling = RopeScaling::kYarn;
    s.rope.factor = p.Double("factor");
    s.rope.original_max_position = p.Int("original_max_position_embeddings", s.max_position);
    s.rope.beta_fast = p.Double("beta_fast", 32.0);
    s.rope.beta_slow = p.Double("beta_slow", 1.0);
    s.rope.mscale = p.Double("mscale", 1.0);
    s.rope.mscale_all_dim = p.Double("mscale_all_dim", 0.0);
  } else {
    p.Fail(ErrorCode::kUnsupported, type_key,
           "is '" + type + "' (supported: default, linear, llama3, yarn)");
  }
  if (s.rope.factor <= 0) p.Fail(ErrorCode::kCorruptData, "factor", "must be positive");
}

void ReadMla(const Fields& f, ModelSpec& s) {
  s.mla.q_lora_rank = f.Int("q_lora_rank", 0);
  s.mla.kv_lora_rank = f.Int("kv_lora_rank");
  s.mla.qk_nope_head_dim = f.Int("qk_nope_head_dim");
  s.mla.qk_rope_head_dim = f.Int("qk_rope_head_dim");
  s.mla.v_head_dim = f.Int("v_head_dim");
  if (s.mla.kv_lora_rank <= 0) f.Fail(ErrorCode::kCorruptData, "kv_lora_rank", "must be positive");
  if (s.mla.qk_rope_head_dim <= 0 || s.mla.qk_rope_head_dim % 2 != 0) {
    f.Fail(ErrorCode::kCorruptData, "qk_rope_head_dim", "must be positive and even");
  }
  s.head_dim = s.mla.qk_nope_head_dim + s.mla.qk_rope_head_dim;
  s.num_kv_heads = s.num_heads;
  s.rope.dim = s.mla.qk_rope_head_dim;
}

void ReadMoe(const Fields& f, ModelSpec& s, bool v3) {
  MoeSpec m;
  m.num_experts = f.Int("n_routed_experts", 0);
  m.first_k_dense_replace = f.Int("first_k_dense_replace", 0);
  if (m.num_experts == 0 || m.first_k_dense_replace >= s.num_layers) return;  // all dense
  if (f.Int("moe_layer_freq", 1) != 1) {
    f.Fail(ErrorCode::kUnsupported, "moe_layer_freq", "other than 1 is not supported");
  }
  m.num_experts_per_tok = f.Int("num_experts_per_tok");
  m.num_shared_experts = f.Int("n_shared_experts", 0);
  m.expert_ffn_dim = f.Int("moe_intermediate_size");
  m.n_group = f.Int("n_group", 1);
  m.topk_group = f.Int("topk_group", 1);
  m.norm_topk_prob = f.Bool("norm_topk_prob", false);
  m.routed_scaling_factor = f.Double("routed_scaling_factor", 1.0);
  m.scoring_func = f.String("scoring_func", v3 ? "sigmoid" : "softmax");
  m.topk_method = f.String("topk_method", v3 ? "noaux_tc" : "greedy");
  if (m.num_experts_per_tok <= 0 || m.num_experts_per_tok > m.num_experts) {
    f.Fail(ErrorCode::kCorruptData, "num_experts_per_tok",
           "must be in [1, n_routed_experts] (got " + std::to_string(m.num_experts_per_tok) + ")");
  }
  if (m.expert_ffn_dim <= 0) f.Fail(ErrorCode::kCorruptData, "moe_intermediate_size", "must be positive");
  if (m.n_group <= 0 || m.num_experts % m.n_group != 0) {
    f.Fail(ErrorCode::kCorruptData, "n_group", "must divide n_routed_experts");
  }
  if (m.topk_group <= 0 || m.topk_group > m.n_group) {
    f.Fail(ErrorCode::kCorruptData, "topk_group", "must be in [1, n_group]");
  }
  if (m.scoring_func != "softmax" && m.scoring_func != "sigmoid") {
    f.Fail(ErrorCode::kUnsupported, "scoring_func", "is '" + m.scoring_func + "' (softmax or sigmoid)");
  }
  if (m.topk_method != "greedy" && m.topk_method != "group_limited_greedy" &&
      m.topk_method != "noaux_tc") {
    f.Fail(ErrorCode::kUnsupported, "topk_method", "is '" + m.topk_method + "'");
  }
  s.moe = m;
}

}  // namespace

ModelSpec SpecFromHfConfig(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    ThrowCorrupt(source + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) ThrowCorrupt(source + ": expected a JSON object at the top level");
  const Fields f(root, source);

  ModelSpec s;
  s.name = source;
  s.architecture = Architecture(root, f);
  const bool deepseek = s.architecture.starts_with("deepseek");

  const std::string act = f.String("hidden_act", "silu");
  if (act != "silu") f.Fail(ErrorCode::kUnsupported, "hidden_act", "is '" + act + "' (only silu)");
  if (f.Bool("mlp_bias", false)) f.Fail(ErrorCode::kUnsupported, "mlp_bias", "true is not supported");

  s.vocab_size = f.Int("vocab_size");
  s.dim = f.Int("hidden_size");
  s.num_layers = f.Int("num_hidden_layers");
  s.num_heads = f.Int("num_attention_heads");
  if (s.num_heads <= 0) f.Fail(ErrorCode::kCorruptData, "num_attention_heads", "must be positive");
  s.num_kv_heads = f.Int("num_key_value_heads", s.num_heads);
  s.head_dim = f.Int("head_dim", s.dim / s.num_heads);
  s.ffn_dim = f.Int("intermediate_size");
  s.norm_eps = f.Double("rms_norm_eps", 1e-6);
  s.max_position = f.Int("max_position_embeddings", deepseek ? 4096 : 2048);
  s.tied_embeddings = f.Bool("tie_word_embeddings", false);
  s.weight_dtype = WeightDType(f);

  ReadRope(root, f, s);
  s.rope.dim = s.head_dim;
  s.rope.interleaved = false;  // transformers rotates halves for llama/mistral/qwen2

  if (s.architecture == "llama") {
    s.qkv_bias = f.Bool("attention_bias", false);
  } else if (s.architecture == "mistral") {
    s.sliding_window = f.Int("sliding_window", 0);
  } else if (s.architecture == "qwen2") {
    s.qkv_bias = true;
    if (f.Bool("use_sliding_window", false)) {
      f.Fail(ErrorCode::kUnsupported, "use_sliding_window",
             "true is not supported (Qwen2 mixes windowed and full layers)");
    }
  } else {  // deepseek_v2 / deepseek_v3
    if (f.Bool("attention_bias", false)) {
      f.Fail(ErrorCode::kUnsupported, "attention_bias", "true is not supported for MLA");
    }
    ReadMla(f, s);
    ReadMoe(f, s, s.architecture == "deepseek_v3");
    s.rope.interleaved =
        s.architecture == "deepseek_v2" ? true : f.Bool("rope_interleave", true);
  }
  if (s.sliding_window < 0) f.Fail(ErrorCode::kCorruptData, "sliding_window", "must not be negative");
  s.Validate();
  return s;
}

ModelSpec SpecFromHfConfigFile(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) ThrowNotFound(p.string() + ": cannot open the Hugging Face config");
  std::ostringstream text;
  text << in.rdbuf();
  return SpecFromHfConfig(text.str(), p.string());
}

}  // namespace pagoda
