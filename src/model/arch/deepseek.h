// DeepSeek-V2/V3: multi-head latent attention (MLA) over a compressed paged cache, and
// DeepSeekMoE feed-forward layers (dense for the first first_k_dense_replace layers).
//
// MLA per layer (r = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
// d_v = v_head_dim, H heads):
//
//   x --q_proj (or q_a_proj -> q_a_layernorm -> q_b_proj)--> q [H, d_n + d_r] = [q_nope | q_pe]
//   x --kv_a_proj_with_mqa--> [c_kv (r) | k_pe (d_r)];  c_kv = kv_a_layernorm(c_kv)
//   RoPE(q_pe), RoPE(k_pe)  (one k_pe shared by all heads)
//   cache <- (c_kv, k_pe)                 the ONLY per-token state: (r + d_r) values per layer
//   q_lat[h] = W_UK[h]^T q_nope[h]        (r values; W_UK[h] = kv_b_proj rows of head h's keys)
//   o_lat[h] = MlaAttention(q_lat[h] | q_pe[h]) over (c_kv | k_pe)    (kernels/cpu/mla_attention.h)
//   o[h]     = W_UV[h] o_lat[h]           (d_v values; W_UV[h] = kv_b_proj rows of head h's values)
//   out      = o_proj(o)
//
// This is the "absorbed" form, used for every token (prefill and decode alike), so a
// prefill chunk and a decode produce identical results: per-head K/V never exist.
// W_UK is transposed once at construction into a model-owned copy (same dtype, same size as
// W_UK); W_UV is used in place (one prepared view per head). Every matrix is prepared
// row-major (WeightLayout::kRowMajor): the CPU's panels would sum in another order and change
// the bits this model has always produced; packing it is a change of its own. The softmax scale is 1/sqrt(d_n + d_r), times
// YarnMscale(factor, mscale_all_dim)^2 under YaRN scaling with mscale_all_dim set.
//
// RoPE layout: spec.rope.interleaved. DeepSeek-V2 and V3 with rope_interleave rotate
// interleaved pairs, and k_pe is cached in that order (transformers caches V3's k_pe
// de-interleaved: a permutation of the same values, see model/hf_config.h).
//
// Weights are views (WeightMatrix) into memory the loader keeps alive (keep_alive); norm
// weights and the router bias are small f32 copies. Thread-compatible (see model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/params/matmul_params.h"
#include "kernels/params/rope_params.h"
#include "model/arch/moe.h"
#include "model/model.h"

namespace pagoda {

// 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), times YarnMscale(factor, mscale_all_dim)^2
// under YaRN with mscale_all_dim > 0 (DeepSeek's softmax_scale; transformers' `scaling`).
double MlaSoftmaxScale(const ModelSpec& spec);

struct DeepseekLayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  // Queries: wq [H*(d_n+d_r), dim] without q LoRA; else wq_a [q_lora_rank, dim],
  // q_a_norm [q_lora_rank], wq_b [H*(d_n+d_r), q_lora_rank].
  WeightMatrix wq, wq_a, wq_b;
  std::vector<float> q_a_norm;
  WeightMatrix wkv_a;            // [r + d_r, dim]
  std::vector<float> kv_a_norm;  // [r]
  WeightMatrix wkv_b;            // [H*(d_n+d_v), r]: per head d_n key rows then d_v value rows
  WeightMatrix wo;               // [dim, H*d_v]
  SwiGluWeights mlp;             // dense layers (layer < first_k_dense_replace or no MoE)
  MoeWeights moe;                // MoE layers (experts empty in dense layers)
};

struct DeepseekWeights {
  WeightMatrix embedding;         // [vocab, dim]
  WeightMatrix output;            // [vocab, dim]
  std::vector<float> final_norm;  // [dim]
  std::vector<DeepseekLayerWeights> layers;
  std::vector<std::shared_ptr<const void>> keep_alive;  // what backs the views
};

class DeepseekModel : public Model {
 public:
  // REQUIRES: spec.is_mla(); weights match spec (the loader checks shapes and throws before
  // this). Throws kUnsupported when kv_b_proj is in a quantized dtype (W_UK is transposed).
  DeepseekModel(ModelSpec spec, DeepseekWeights weights, std::vector<int32_t> eos_ids = {});

  const ModelSpec& spec() const override { return spec_; }
  // num_kv_heads 1, head_dim = kv_lora_rank (K: c_kv), head_dim_v = qk_rope_head_dim (V: k_pe).
  KVStorageShape KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const override;
  void Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
               const ForwardObserver* observer) override;
  void ReserveWorkspace(int64_t max_tokens, int64_t max_logits) override;
  int64_t WeightBytesPerToken() const override;
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  // Heads split (q / q_b rows, kv_b rows, o columns); the latent path (kv_a, its norm, the
  // latent cache, q_a) replicated; the dense MLP, every routed expert and the shared experts
  // split by width; the router replicated (every rank routes alike).
  std::unique_ptr<Model> Shard(int rank, int size, Backend& backend) const override;

  // The softmax scale MLA uses (see above).
  float softmax_scale() const { return softmax_scale_; }
  bool is_moe_layer(int64_t layer) const {
    return spec_.moe.num_experts > 0 && layer >= spec_.moe.first_k_dense_replace;
  }

 protected:
  void PrepareWeights(Backend& backend) override;

 private:
  // The activation buffers of a step of n tokens and m logits rows (workspace slots).
  struct Buffers {
    TensorView x, h, y, q, qa, kv, c_kv, k_pe, q_abs, col, lat, o_lat, o, vh, gate, up, sel;
  };
  Buffers Views(int64_t n, int64_t m);
  // B.h -> B.y: the attention block of layer l (after the input norm).
  void Attention(int64_t l, Backend& backend, KVCache& cache, const Buffers& B);

  ModelSpec spec_;
  DeepseekWeights w_;
  RopeParams rope_;
  float softmax_scale_ = 1.0f;
  // Per layer, per head: W_UK[h]^T [r, d_n] views into w_uk_t_storage_.
  std::vector<std::vector<WeightMatrix>> w_uk_t_;
  std::vector<std::vector<uint8_t>> w_uk_t_storage_;
  // The weights as the backend prepared them.
  struct Layer {
    PreparedVector attn_norm, ffn_norm, q_a_norm, kv_a_norm;
    Weight wq, wq_a, wq_b, wkv_a, wo;
    std::vector<Weight> w_uk_t, w_uv;  // per head: W_UK[h]^T [r, d_n], W_UV[h] [d_v, r]
    Weight mlp_gate, mlp_up, mlp_down;  // dense layers
    MoeLayer moe;                       // MoE layers
  };
  std::vector<Layer> layers_;
  Weight embedding_, output_;
  PreparedVector final_norm_;
  std::vector<int32_t> eos_ids_;
  int tp_size_ = 1;  // > 1: a rank's shard; row-parallel outputs are all-reduced
};

}  // namespace pagoda
