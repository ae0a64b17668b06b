// DeepSeek-V2/V3 from a Hugging Face directory: config.json + model.safetensors (or shards
// listed by model.safetensors.index.json).
//
// Tensors (transformers' names; H heads, r = kv_lora_rank, d_n/d_r/d_v as in deepseek.h):
//   model.embed_tokens.weight [vocab, dim]; model.norm.weight [dim]; lm_head.weight [vocab, dim]
//     (the embedding when tie_word_embeddings)
//   model.layers.N.input_layernorm.weight, post_attention_layernorm.weight [dim]
//   model.layers.N.self_attn.q_proj.weight [H*(d_n+d_r), dim]              (no q LoRA)
//     or q_a_proj.weight [q_lora_rank, dim], q_a_layernorm.weight [q_lora_rank],
//        q_b_proj.weight [H*(d_n+d_r), q_lora_rank]
//   model.layers.N.self_attn.kv_a_proj_with_mqa.weight [r + d_r, dim], kv_a_layernorm.weight [r],
//     kv_b_proj.weight [H*(d_n+d_v), r], o_proj.weight [dim, H*d_v]
//   dense layers: model.layers.N.mlp.{gate,up}_proj.weight [ffn, dim], down_proj.weight [dim, ffn]
//   MoE layers (N >= first_k_dense_replace): mlp.gate.weight [E, dim],
//     mlp.gate.e_score_correction_bias [E] (V3 only), mlp.experts.K.{gate,up,down}_proj.weight
//     ([moe_ffn, dim] x2, [dim, moe_ffn]), mlp.shared_experts.{gate,up,down}_proj.weight
//     (moe_ffn * n_shared_experts wide) when n_shared_experts > 0.
//
// Matrices (F32, F16, BF16) are used in place from the memory map; norms and the router bias
// are copied to f32. FP8 checkpoints (weight_scale_inv) are not supported.
//
// Errors: pagoda::Error naming the file and the tensor: kNotFound for a missing file or tensor,
// kCorruptData for a wrong shape, kUnsupported for a tensor dtype or a non-DeepSeek spec.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace pagoda {

// REQUIRES: spec is dir's config as SpecFromHfConfigFile reads it (architecture deepseek_v2 or
// deepseek_v3).
std::unique_ptr<Model> LoadDeepseekHfModel(const std::string& dir, ModelSpec spec,
                                           Backend& backend = DefaultCpuBackend());

}  // namespace pagoda
