// Hugging Face config.json -> ModelSpec (the shape only; weights are read elsewhere).
//
// SpecFromHfConfig (declared in spec_loader.h, implemented in hf_config.cc) reads the
// keys of transformers 4 (`rope_theta`, `rope_scaling`, `torch_dtype`) and transformers 5
// (`rope_parameters`, `dtype`) for these architectures:
//
//   architectures[0]        ModelSpec::architecture  notes
//   LlamaForCausalLM        llama                    attention_bias -> qkv_bias
//   MistralForCausalLM      mistral                  sliding_window (null: full attention)
//   Qwen2ForCausalLM        qwen2                    qkv_bias = true; use_sliding_window
//                                                    = true is rejected (unsupported)
//   DeepseekV2ForCausalLM   deepseek_v2              MLA + DeepSeekMoE
//   DeepseekV3ForCausalLM   deepseek_v3              MLA + DeepSeekMoE (sigmoid, noaux_tc)
//
// (`model_type` is used when `architectures` is absent.)
//
// Defaults: num_key_value_heads = num_attention_heads; head_dim = hidden_size /
// num_attention_heads; rms_norm_eps 1e-6; tie_word_embeddings false; rope theta 10000;
// dtype bf16. JSON null counts as absent (transformers writes `"q_lora_rank": null`).
//
// RoPE convention (RopeSpec::interleaved):
//   * Llama, Mistral, Qwen2: false. transformers rotates halves (x[i], x[i + d/2]).
//   * DeepSeek-V2: true. transformers' DeepseekV2 rotates interleaved pairs
//     (x[2i], x[2i+1]) (view_as_complex) and caches k_pe in that order.
//   * DeepSeek-V3: `rope_interleave` (default true, as in DeepseekV3Config and the
//     published checkpoint). When true, transformers first de-interleaves q_pe and k_pe
//     (x[0], x[2], ..., x[1], x[3], ...) and then rotates halves: that is a rotation of
//     the interleaved pairs followed by a permutation of the output. The permutation is
//     the same for q and k, so attention scores are those of rotating interleaved pairs,
//     and we set interleaved = true. Only the *stored* k_pe differs: transformers caches
//     it de-interleaved (the golden `v.a.L` of deepseek-v3-moe), so a test comparing the
//     cache with it must apply that permutation. `rope_interleave: false` -> false.
//
// MLA fields: head_dim = qk_nope_head_dim + qk_rope_head_dim (the query/key width per
// head, whatever `head_dim` says: transformers 5 writes qk_rope_head_dim there),
// num_kv_heads = num_attention_heads (heads after decompression from the latent),
// rope.dim = qk_rope_head_dim; the cache shape comes from ModelSpec::kv_shape().
// MoE fields: when first_k_dense_replace >= num_hidden_layers (every layer dense, as in
// the deepseek-v2-mla fixture) the MoeSpec is left empty (num_experts = 0).
//
// RoPE scaling types: default, linear, llama3, yarn (factor, original_max_position_
// embeddings, beta_fast, beta_slow, mscale, mscale_all_dim). Others (dynamic, longrope,
// ...) throw kUnsupported.
//
// Errors: pagoda::Error whose message starts with `source` and names the field:
// kCorruptData for malformed JSON, a missing required field or a wrong JSON type;
// kUnsupported for an unknown architecture, activation or RoPE type; kInvalidArgument
// (from ModelSpec::Validate) for inconsistent shapes.
#pragma once

#include <string>

#include "model/spec_loader.h"

namespace pagoda {

// Reads `path` (a config.json, or a directory holding one) and calls SpecFromHfConfig.
// Throws kNotFound when the file cannot be read.
ModelSpec SpecFromHfConfigFile(const std::string& path);

}  // namespace pagoda
