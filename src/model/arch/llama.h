// The Llama family (Llama 1/2/3, Mistral, Qwen2): RMSNorm, RoPE, MHA/GQA/MQA with
// optional q/k/v biases and sliding windows, SwiGLU MLP, tied or untied embeddings.
//
// Weights are views (WeightMatrix) into memory the loader keeps alive: a memory map or
// converted buffers. Norm weights and biases are small f32 copies.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/packed_weights.h"
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
  void Forward(const ForwardBatch& batch, KVStorage& cache, float* logits,
               const ForwardObserver* observer) override;
  int64_t WeightBytesPerToken() const override;
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }

 private:
  void PackForCpu();

  ModelSpec spec_;
  LlamaWeights w_;
  // The projections repacked for the CPU kernels (kernels/cpu/packed_weights.h), when
  // the CPU's MatMul level has a packed kernel; w_'s views point at them. q|k|v and
  // gate|up are stacked into one packed matrix each (one MatMul, one activation
  // quantization): fused_[l] holds their views (rows == 0 when not fused).
  struct FusedProjections {
    WeightMatrix qkv, gate_up;
  };
  std::vector<std::shared_ptr<const PackedWeights>> packed_;
  std::vector<FusedProjections> fused_;
  // Activation buffers of Forward, kept between calls (one Forward at a time): a prefill
  // does not page in and zero fresh memory for every call. Grown to the largest batch seen.
  struct Workspace {
    std::vector<float> x, h, q, k, v, attn, gate, up, fused;
  };
  Workspace ws_;
  RopeParams rope_;
  std::vector<int32_t> eos_ids_;
};

}  // namespace pagoda
