// DeepSeekMoE: a router picks num_experts_per_tok routed experts per token, their SwiGLU
// outputs are summed with the router weights, and the shared experts (one wide SwiGLU) are
// added for every token.
//
// Routing (MoeSpec):
//   scoring_func softmax (DeepSeek-V2): scores = softmax(router logits);
//     topk_method greedy: the top-k scores; group_limited_greedy: only experts of the
//     topk_group groups with the highest max score compete (others count as 0).
//   scoring_func sigmoid (DeepSeek-V3, noaux_tc): scores = sigmoid(router logits); experts
//     are *selected* on scores + e_score_correction_bias within the topk_group groups whose
//     two best biased scores sum highest (others count as 0), but *weighted* by the unbiased
//     scores.
//   Weights: norm_topk_prob (and top_k > 1 for V2) divides by their sum (+1e-20); the result is
//   multiplied by routed_scaling_factor (V2 multiplies only when it does not normalize, as
//   DeepSeek-V2's reference code does).
//
// Execution is the backend's (Backend::Moe; on the CPU kernels/cpu/moe.h): tokens are grouped
// per expert and each expert runs one MatMul chain over its gathered tokens. MatMul is
// batch-invariant, and each token sums its experts' outputs in its own top-k order, so a
// token's result does not depend on the rest of the batch.
// Weights are views the loader keeps alive (see deepseek.h). Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "kernels/params/matmul_params.h"
#include "model/model_spec.h"

namespace pagoda {

struct SwiGluWeights {
  WeightMatrix gate, up;  // [ffn, dim]
  WeightMatrix down;      // [dim, ffn]
  bool empty() const { return gate.rows == 0; }
};

struct MoeWeights {
  WeightMatrix router;                 // [num_experts, dim]
  std::vector<float> score_bias;       // [num_experts] e_score_correction_bias; empty: none
  std::vector<SwiGluWeights> experts;  // [num_experts], each [expert_ffn_dim] wide
  SwiGluWeights shared;                // [num_shared_experts * expert_ffn_dim] wide; may be empty
};

// The layer's weights prepared on `backend` (Backend::Moe runs it). `layout` as in
// Backend::PrepareWeight.
MoeLayer PrepareMoeLayer(Backend& backend, const MoeWeights& w, WeightLayout layout);

}  // namespace pagoda
