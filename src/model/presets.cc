#include "model/presets.h"

#include <functional>
#include <utility>

#include "core/error.h"

namespace pagoda {
namespace {

ModelSpec Llama(std::string name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                int64_t ffn, int64_t vocab, bool tied, double theta, int64_t max_pos) {
  ModelSpec s;
  s.name = std::move(name);
  s.architecture = "llama";
  s.dim = dim;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = dim / heads;
  s.ffn_dim = ffn;
  s.vocab_size = vocab;
  s.tied_embeddings = tied;
  s.rope.theta = theta;
  s.rope.dim = s.head_dim;
  s.max_position = max_pos;
  return s;
}

ModelSpec Llama3Scaled(ModelSpec s) {
  s.rope.scaling = RopeScaling::kLlama3;
  s.rope.factor = 8.0;
  s.rope.low_freq_factor = 1.0;
  s.rope.high_freq_factor = 4.0;
  s.rope.original_max_position = 8192;
  return s;
}

// Qwen2: Llama shape plus q/k/v biases, rope theta 1e6, HF half rotation.
ModelSpec Qwen2(std::string name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                int64_t ffn, int64_t vocab, bool tied, int64_t max_pos) {
  ModelSpec s = Llama(std::move(name), dim, layers, heads, kv_heads, ffn, vocab, tied, 1e6, max_pos);
  s.architecture = "qwen2";
  s.qkv_bias = true;
  s.norm_eps = 1e-6;
  s.rope.interleaved = false;
  return s;
}

// DeepSeek-V2/V3: multi-head latent attention plus DeepSeekMoE, YaRN RoPE on the
// qk_rope_head_dim part only. head_dim is the query/key head width (nope + rope) and
// num_kv_heads the head count after decompression; the cache holds the latent (kv_shape()).
struct DeepseekShape {
  int64_t dim, layers, heads, ffn, vocab;
  int64_t q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head;
  int64_t experts, experts_per_tok, shared, expert_ffn, first_dense, n_group, topk_group;
  bool norm_topk_prob;
  double routed_scaling;
  const char* scoring;
  const char* topk_method;
  double yarn_mscale;  // mscale = mscale_all_dim
};

ModelSpec Deepseek(std::string name, std::string arch, const DeepseekShape& d) {
  ModelSpec s;
  s.name = std::move(name);
  s.architecture = std::move(arch);
  s.dim = d.dim;
  s.num_layers = d.layers;
  s.num_heads = d.heads;
  s.num_kv_heads = d.heads;
  s.head_dim = d.qk_nope + d.qk_rope;
  s.ffn_dim = d.ffn;
  s.vocab_size = d.vocab;
  s.norm_eps = 1e-6;
  s.max_position = 163840;
  s.mla = {d.q_lora_rank, d.kv_lora_rank, d.qk_nope, d.qk_rope, d.v_head};
  s.moe.num_experts = d.experts;
  s.moe.num_experts_per_tok = d.experts_per_tok;
  s.moe.num_shared_experts = d.shared;
  s.moe.expert_ffn_dim = d.expert_ffn;
  s.moe.first_k_dense_replace = d.first_dense;
  s.moe.n_group = d.n_group;
  s.moe.topk_group = d.topk_group;
  s.moe.norm_topk_prob = d.norm_topk_prob;
  s.moe.routed_scaling_factor = d.routed_scaling;
  s.moe.scoring_func = d.scoring;
  s.moe.topk_method = d.topk_method;
  s.rope.theta = 10000.0;
  s.rope.dim = d.qk_rope;
  // Both published checkpoints rotate interleaved pairs (see hf_config.h).
  s.rope.interleaved = true;
  s.rope.scaling = RopeScaling::kYarn;
  s.rope.factor = 40.0;
  s.rope.original_max_position = 4096;
  s.rope.beta_fast = 32.0;
  s.rope.beta_slow = 1.0;
  s.rope.mscale = d.yarn_mscale;
  s.rope.mscale_all_dim = d.yarn_mscale;
  return s;
}

const std::vector<std::pair<std::string, std::function<ModelSpec()>>>& Table() {
  static const std::vector<std::pair<std::string, std::function<ModelSpec()>>> table = {
      {"llama-tiny", [] { return Llama("llama-tiny", 256, 4, 4, 2, 704, 32000, true, 10000, 2048); }},
      {"llama-110m", [] { return Llama("llama-110m", 768, 12, 12, 12, 2048, 32000, true, 10000, 1024); }},
      {"llama-1b", [] { return Llama("llama-1b", 2048, 16, 32, 8, 5632, 32000, false, 10000, 2048); }},
      {"llama-3-8b", [] {
         return Llama3Scaled(Llama("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, false, 500000, 131072));
       }},
      // Published Hugging Face configurations. The llama-3 rows carry the 3.1 release's
      // 128K context (llama3 RoPE scaling), as llama-3-8b above does.
      {"llama-3-70b", [] {  // meta-llama/Llama-3.1-70B
         return Llama3Scaled(Llama("llama-3-70b", 8192, 80, 64, 8, 28672, 128256, false, 500000, 131072));
       }},
      {"llama-3.1-405b", [] {  // meta-llama/Llama-3.1-405B
         return Llama3Scaled(
             Llama("llama-3.1-405b", 16384, 126, 128, 8, 53248, 128256, false, 500000, 131072));
       }},
      {"qwen2.5-7b", [] {  // Qwen/Qwen2.5-7B
         return Qwen2("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, false, 131072);
       }},
      {"qwen2.5-72b", [] {  // Qwen/Qwen2.5-72B
         return Qwen2("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064, false, 131072);
       }},
      {"mistral-7b", [] {  // mistralai/Mistral-7B-v0.1: sliding window 4096
         ModelSpec s = Llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, false, 10000, 32768);
         s.architecture = "mistral";
         s.sliding_window = 4096;
         s.rope.interleaved = false;
         return s;
       }},
      {"deepseek-v2-lite", [] {  // deepseek-ai/DeepSeek-V2-Lite
         return Deepseek("deepseek-v2-lite", "deepseek_v2",
                         {2048, 27, 16, 10944, 102400, 0, 512, 128, 64, 128, 64, 6, 2, 1408, 1, 1,
                          1, false, 1.0, "softmax", "greedy", 0.707});
       }},
      {"deepseek-v3", [] {  // deepseek-ai/DeepSeek-V3 (the MTP layer is not counted)
         return Deepseek("deepseek-v3", "deepseek_v3",
                         {7168, 61, 128, 18432, 129280, 1536, 512, 128, 64, 128, 256, 8, 1, 2048, 3,
                          8, 4, true, 2.5, "sigmoid", "noaux_tc", 1.0});
       }},
  };
  return table;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, make] : Table()) names.push_back(name);
  return names;
}

bool HasPreset(std::string_view name) {
  for (const auto& [n, make] : Table()) {
    if (n == name) return true;
  }
  return false;
}

ModelSpec GetPreset(std::string_view name) {
  for (const auto& [n, make] : Table()) {
    if (n == name) return make();
  }
  std::string known;
  for (const auto& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
  ThrowInvalidArgument("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace pagoda
