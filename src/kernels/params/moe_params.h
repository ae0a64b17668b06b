// The routing configuration of a DeepSeekMoE layer (model/arch/moe.h explains it), shared by
// the model spec, the CPU and (later) CUDA MoE kernels.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// Mixture of experts. Zero num_experts means a dense MLP everywhere.
struct MoeSpec {
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t num_shared_experts = 0;
  int64_t expert_ffn_dim = 0;
  int64_t first_k_dense_replace = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "softmax";  // softmax | sigmoid
  std::string topk_method = "greedy";    // greedy | group_limited_greedy | noaux_tc
};

}  // namespace pagoda
