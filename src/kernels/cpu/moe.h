// DeepSeekMoE on the CPU: the router's decision and the expert dispatch (model/arch/moe.h
// describes the layer). Tokens are grouped per expert and each expert runs one MatMul chain
// over its gathered tokens; MatMul is batch-invariant and each token sums its experts' outputs
// in its own top-k order, so a token's result does not depend on the rest of the batch.
// Scratch is kept per thread between calls: a warmed-up call allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/params/moe_params.h"

namespace pagoda {

// One SwiGLU MLP: y = down(silu(gate x) * up x). Empty when gate.rows == 0.
struct CpuSwiGlu {
  CpuWeight gate, up;  // [ffn, dim]
  CpuWeight down;      // [dim, ffn]
  bool empty() const { return gate.rows == 0; }
};

struct CpuMoeWeights {
  CpuWeight router;                // [num_experts, dim]
  std::span<const float> score_bias;  // [num_experts] or empty
  std::vector<CpuSwiGlu> experts;  // [num_experts]
  CpuSwiGlu shared;                // may be empty
};

// y = down(silu(gate x) * up x) for x: [num_tokens, dim], y: [num_tokens, dim] (no aliasing).
// gate / up: scratch of [num_tokens, ffn] floats each.
void SwiGlu(const CpuSwiGlu& w, const float* x, int64_t num_tokens, float* y, float* gate, float* up);

// The routing decision for router logits [num_tokens, num_experts]: expert ids and weights,
// [num_tokens, num_experts_per_tok] each, in descending order of the selection score.
void RouteTokens(const MoeSpec& spec, std::span<const float> score_bias, const float* logits,
                 int64_t num_tokens, int32_t* expert_ids, float* weights);

// y = sum over the routed experts of weight * expert(x) + shared(x).
// x: [num_tokens, dim], y: [num_tokens, dim] f32 (no aliasing).
void MoeForward(const MoeSpec& spec, const CpuMoeWeights& w, const float* x, int64_t num_tokens,
                int64_t dim, float* y);

}  // namespace pagoda
