// ModelSpec: the shape of a model, independent of where its weights come from
// (GGUF, safetensors + config.json, llama2.c, a dummy preset). The engine, the KV
// cache sizing and the planner all read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/params/moe_params.h"
#include "kv/kv_layout.h"

namespace pagoda {

enum class AttentionKind { kMHA, kGQA, kMQA, kMLA };
const char* AttentionKindName(AttentionKind k);

enum class RopeScaling { kNone, kLinear, kLlama3, kYarn };

struct RopeSpec {
  double theta = 10000.0;
  // Dimensions rotated per head (= head_dim, or qk_rope_head_dim for MLA).
  int64_t dim = 0;
  // true: rotate interleaved pairs (x[2i], x[2i+1]) as GGUF llama / llama2.c / DeepSeek-V2
  // store them; false: rotate halves (x[i], x[i + dim/2]) as Hugging Face and GGUF qwen2 do.
  bool interleaved = true;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  // YaRN
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  // Per-frequency divisors read from a file (GGUF rope_freqs.weight); empty when absent.
  std::vector<float> freq_factors;
};

// DeepSeek multi-head latent attention. Zero kv_lora_rank means "not MLA".
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: queries projected directly
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

struct ModelSpec {
  std::string name;          // preset or file name, for logs
  std::string architecture;  // llama | qwen2 | mistral | deepseek_v2 | deepseek_v3
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  double norm_eps = 1e-5;
  RopeSpec rope;
  int64_t max_position = 2048;  // the model's trained context
  bool tied_embeddings = false;
  bool qkv_bias = false;
  int64_t sliding_window = 0;  // 0: full attention
  MlaSpec mla;
  MoeSpec moe;
  DType weight_dtype = DType::kBF16;  // of the big matrices, for sizing

  bool is_mla() const { return mla.kv_lora_rank > 0; }
  AttentionKind attention_kind() const;
  // What the KV cache must hold per token per layer (kv/ sizes blocks from it).
  KVShape kv_shape() const;
  // Parameters in the matrices and embeddings (for weight bytes and FLOPs).
  int64_t NumParameters() const;
  // Parameters read per decoded token (MoE: only the routed experts used).
  int64_t NumActiveParameters() const;
  // Throws InvalidArgument naming the field when the shape is inconsistent.
  void Validate() const;
};

}  // namespace pagoda
