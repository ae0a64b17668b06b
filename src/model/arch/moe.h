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
// Execution: tokens are grouped per expert and each expert runs one MatMul over its gathered
// tokens. MatMul is batch-invariant, and each token sums its experts' outputs in its own
// top-k order, so a token's result does not depend on the rest of the batch.
// Weights are views the loader keeps alive (see deepseek.h). Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

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

// y = down(silu(gate x) * up x) for x: [num_tokens, dim], y: [num_tokens, dim] (no aliasing).
void SwiGlu(const SwiGluWeights& w, const float* x, int64_t num_tokens, float* y);

// The routing decision for router logits [num_tokens, num_experts]: expert ids and weights,
// [num_tokens, num_experts_per_tok] each, in descending order of the selection score.
void RouteTokens(const MoeSpec& spec, const std::vector<float>& score_bias, const float* logits,
                 int64_t num_tokens, int32_t* expert_ids, float* weights);

// y = sum over the routed experts of weight * expert(x) + shared(x).
// x: [num_tokens, dim], y: [num_tokens, dim] f32 (no aliasing).
void MoeForward(const MoeSpec& spec, const MoeWeights& w, const float* x, int64_t num_tokens,
                int64_t dim, float* y);

}  // namespace pagoda
