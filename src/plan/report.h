// How `pagoda plan` shows a plan: one JSON object (--json) or a readable table, and the
// --compare table (32K and 128K context at batch 1 and 16, in bf16, fp8 and int4, for
// the MHA, GQA and MLA variants of the model's size).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/advisor.h"
#include "plan/planner.h"

namespace pagoda {

// Keys: model, gpu, inputs, weight_bytes, kv_bytes_per_token, kv_bytes_per_sequence,
// kv_bytes_total, fits, max_concurrency, max_model_len, num_blocks, decode_step_seconds
// {memory_bound, compute_bound}, bottleneck, recommended {gpu_memory_utilization,
// max_model_len, enable_prefix_caching, kv_cache_dtype, min_num_gpus}, advice [...], and
// the per-GPU details (memory, blocks, prefix savings, roofline bytes and FLOPs).
nlohmann::json PlanToJson(const PlanInputs& in, const PlanResult& plan, const Advice& advice);

// The same as a table plus the advice, for people.
void PrintPlan(std::FILE* out, const PlanInputs& in, const PlanResult& plan, const Advice& advice);

// The KV shapes --compare contrasts for a model of this size: MHA (a KV head per query
// head), GQA (8 KV heads), MLA (DeepSeek's latent 512 + RoPE 64), each of head width
// model.head_dim (MLA models: qk_nope + qk_rope for K, v_head_dim for V).
struct KVVariant {
  std::string name;
  KVShape shape;
};
std::vector<KVVariant> CompareVariants(const ModelSpec& model);

// Rows: variant x {bf16, fp8_e4m3, int4}; columns: bytes per token, then KV total and
// whether it fits for {32K, 128K} x {1, 16} requests. `--json` prints the rows as JSON.
nlohmann::json CompareToJson(const PlanInputs& base);
void PrintCompare(std::FILE* out, const PlanInputs& base);

}  // namespace pagoda
