// The Llama family (Llama 1/2/3, Mistral, Qwen2): RMSNorm, RoPE, MHA/GQA/MQA with
// optional q/k/v biases and sliding windows, SwiGLU MLP, tied or untied embeddings.
//
// Weights are views (WeightMatrix) into memory the loader keeps alive: a memory map or
// converted buffers. Norm weights and biases are small f32 copies. Prepare hands them to the
// backend (q|k|v and gate|up stacked where the backend has a stacked form); Forward calls only
// the backend.
#pragma once

#include <memory>
#include <vector>

#include "kernels/params/matmul_params.h"
#include "kernels/params/rope_params.h"
#include "model/model.h"

namespace pagoda {

struct LlamaLayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  WeightMatrix wq, wk, wv, wo;             // [heads*hd, dim], [kv*hd, dim] x2, [dim, heads*hd]
  std::vector<float> bq, bk, bv;           // empty when the model has no biases
  WeightMatrix w_gate, w_up, w_down;       // [ffn, dim], [ffn, dim], [dim, ffn]
};

struct LlamaWeights {
  WeightMatrix embedding;         // [vocab, dim]
  WeightMatrix output;            // [vocab, dim] (the embedding when tied)
  std::vector<float> final_norm;  // [dim]
  std::vector<LlamaLayerWeights> layers;
  // Whatever backs the views (a mapped file, converted buffers).
  std::vector<std::shared_ptr<const void>> keep_alive;
};

class LlamaModel : public Model {
 public:
  // REQUIRES: weights match spec (the loader checks shapes and throws before this).
  LlamaModel(ModelSpec spec, LlamaWeights weights, std::vector<int32_t> eos_ids = {});

  const ModelSpec& spec() const override { return spec_; }
  KVStorageShape KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const override;
  void Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
               const ForwardObserver* observer) override;
  int64_t WeightBytesPerToken() const override;
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  void ReserveWorkspace(int64_t max_tokens, int64_t max_logits) override;
  std::unique_ptr<Model> Shard(int rank, int size, Backend& backend) const override;

 protected:
  void PrepareWeights(Backend& backend) override;

 private:
  // The activation buffers of a step of n tokens and m logits rows (workspace slots).
  struct Buffers {
    TensorView x, h, q, k, v, attn, gate, up, fused, sel;
  };
  Buffers Views(int64_t n, int64_t m);

  ModelSpec spec_;
  LlamaWeights w_;
  // The weights as the backend prepared them. qkv / gate_up: the stacked projections of a
  // layer (empty when the backend has no stacked form; the parts are then prepared alone).
  struct Layer {
    PreparedVector attn_norm, ffn_norm, bq, bk, bv;
    Weight wq, wk, wv, wo, w_gate, w_up, w_down;
    Weight qkv, gate_up;
  };
  std::vector<Layer> layers_;
  Weight embedding_, output_;
  PreparedVector final_norm_;
  bool any_stacked_ = false;
  RopeParams rope_;
  std::vector<int32_t> eos_ids_;
  // Tensor parallelism: > 1 when this is one rank's shard (the row-parallel outputs are then
  // all-reduced before the residual add).
  int tp_size_ = 1;
};

}  // namespace pagoda
