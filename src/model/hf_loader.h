// Hugging Face model directories: config.json + safetensors (+ generation_config.json).
//
// Architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (the Llama family,
// model/arch/llama.h), loaded here; DeepseekV2/V3ForCausalLM are handed to
// LoadDeepseekHfModel (model/deepseek_loader.h). SpecFromHfConfig rejects the rest. Weights (F32, F16, BF16) are used in place from the memory-mapped
// safetensors files; only norm weights and biases are copied (to f32). HF checkpoints
// rotate halves in RoPE (ModelSpec::rope.interleaved = false, set by SpecFromHfConfig), so
// q_proj/k_proj are used as stored: no permutation, unlike llama.cpp's converter.
//
// Tensor names (transformers):
//   model.embed_tokens.weight [vocab, dim]
//   model.layers.N.input_layernorm.weight [dim], post_attention_layernorm.weight [dim]
//   model.layers.N.self_attn.{q,k,v}_proj.weight [heads*hd | kv*hd, dim] (+ .bias: Qwen2,
//     Llama with attention_bias), o_proj.weight [dim, heads*hd]
//   model.layers.N.mlp.{gate,up}_proj.weight [ffn, dim], down_proj.weight [dim, ffn]
//   model.norm.weight [dim]; lm_head.weight [vocab, dim] unless tie_word_embeddings
//
// EOS ids: generation_config.json `eos_token_id` (an int or a list), else config.json's.
//
// Errors: pagoda::Error naming the file and the tensor or field: kNotFound for a missing
// file or tensor, kCorruptData for a wrong shape, kUnsupported for another architecture
// or tensor dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace pagoda {

std::unique_ptr<Model> LoadHfModel(const std::string& dir, Backend& backend = DefaultCpuBackend());

// The EOS ids declared by dir's generation_config.json (or config.json); may be empty.
std::vector<int32_t> ReadHfEosIds(const std::string& dir);

}  // namespace pagoda
