#include "plan/report.h"

#include <algorithm>

namespace pagoda {
namespace {

using nlohmann::json;

std::string Gib(double bytes) { return FormatBytes(static_cast<int64_t>(bytes)); }

std::string Params(double n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), n >= 1e9 ? "%.2f B" : "%.2f M", n >= 1e9 ? n / 1e9 : n / 1e6);
  return buf;
}

json InputsJson(const PlanInputs& in) {
  return {{"num_gpus", in.num_gpus},
          {"concurrency", in.concurrency},
          {"context", in.context},
          {"input_len", in.input_len >= 0 ? in.input_len : in.context},
          {"kv_cache_dtype", KVCacheDTypeName(in.kv_dtype)},
          {"weight_dtype", in.weights.name},
          {"block_size", in.block_size},
          {"gpu_memory_utilization", in.gpu_memory_utilization},
          {"prefix_share", in.prefix_share}};
}

}  // namespace

json PlanToJson(const PlanInputs& in, const PlanResult& r, const Advice& advice) {
  const Recommendation& rec = advice.recommended;
  const KVShape shape = in.kv_shape.value_or(in.model.kv_shape());
  json j;
  j["model"] = {{"name", in.model.name},
                {"architecture", in.model.architecture},
                {"attention", AttentionKindName(in.model.attention_kind())},
                {"num_parameters", r.num_parameters},
                {"num_active_parameters", r.num_active_parameters},
                {"max_position", in.model.max_position},
                {"kv_layers", shape.num_layers},
                {"kv_heads", shape.num_kv_heads},
                {"kv_head_dim_k", shape.head_dim_k},
                {"kv_head_dim_v", shape.head_dim_v},
                {"kv_rope_dim", shape.rope_dim}};
  j["gpu"] = {{"name", in.gpu.name},
              {"memory_bytes", in.gpu.memory_bytes},
              {"memory_bandwidth", in.gpu.memory_bandwidth},
              {"bf16_flops", in.gpu.bf16_flops},
              {"fp8_flops", in.gpu.fp8_flops}};
  j["inputs"] = InputsJson(in);
  j["weight_bytes"] = r.weight_bytes;
  j["weight_bytes_per_gpu"] = r.weight_bytes_per_gpu;
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["kv_bytes_per_token_per_gpu"] = r.kv_bytes_per_token_per_gpu;
  j["kv_bytes_per_sequence"] = r.kv_bytes_per_sequence;
  j["kv_bytes_total"] = r.kv_bytes_total;
  j["usable_bytes_per_gpu"] = r.usable_bytes_per_gpu;
  j["activation_reserve_bytes"] = r.activation_reserve_bytes;
  j["kv_memory_per_gpu"] = r.kv_memory_per_gpu;
  j["num_blocks"] = r.num_blocks;
  j["kv_capacity_tokens"] = r.kv_capacity_tokens;
  j["blocks_needed"] = r.blocks_needed;
  j["shared_prefix_blocks"] = r.shared_prefix_blocks;
  j["prefix_memory_saved_bytes"] = r.prefix_memory_saved_bytes;
  j["prefix_prefill_saved_fraction"] = r.prefix_prefill_saved_fraction;
  j["weights_fit"] = r.weights_fit;
  j["fits"] = r.fits;
  j["max_concurrency"] = r.max_concurrency;
  j["max_model_len"] = r.max_model_len;
  j["max_model_len_uncapped"] = r.max_model_len_uncapped;
  j["decode_step_seconds"] = {{"memory_bound", r.decode.memory_bound_s},
                              {"compute_bound", r.decode.compute_bound_s}};
  j["decode_bytes_read_per_gpu"] = {{"weights", r.decode.weight_bytes_read},
                                    {"kv", r.decode.kv_bytes_read}};
  j["decode_flops_per_gpu"] = r.decode.flops;
  j["decode_tokens_per_second"] = r.decode_tokens_per_s;
  j["bottleneck"] = r.bottleneck;
  j["recommended"] = {{"gpu_memory_utilization", rec.gpu_memory_utilization},
                      {"max_model_len", rec.max_model_len},
                      {"enable_prefix_caching", rec.enable_prefix_caching},
                      {"kv_cache_dtype", KVCacheDTypeName(rec.kv_cache_dtype)},
                      {"fits", rec.fits},
                      {"tensor_parallel_size", in.num_gpus},
                      {"min_num_gpus", rec.min_num_gpus}};
  j["advice"] = advice.notes;
  return j;
}

void PrintPlan(std::FILE* out, const PlanInputs& in, const PlanResult& r, const Advice& advice) {
  const Recommendation& rec = advice.recommended;
  auto row = [&](const char* key, const std::string& value) {
    std::fprintf(out, "  %-30s %s\n", key, value.c_str());
  };
  auto num = [](double v, const char* fmt) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, v);
    return std::string(buf);
  };
  std::fprintf(out, "pagoda plan: %s (%s, %s) on %lld x %s\n", in.model.name.c_str(),
               in.model.architecture.c_str(), AttentionKindName(in.model.attention_kind()),
               static_cast<long long>(in.num_gpus), in.gpu.name.c_str());
  std::fprintf(out, "  %lld requests x %lld tokens, KV %s, weights %s, block size %lld\n\n",
               static_cast<long long>(in.concurrency), static_cast<long long>(in.context),
               std::string(KVCacheDTypeName(in.kv_dtype)).c_str(), in.weights.name.c_str(),
               static_cast<long long>(in.block_size));
  row("parameters (active)", Params(static_cast<double>(r.num_parameters)) + " (" +
                                 Params(static_cast<double>(r.num_active_parameters)) + ")");
  row("weights (per GPU)", Gib(r.weight_bytes) + " (" + Gib(r.weight_bytes_per_gpu) + ")");
  row("KV bytes per token (per GPU)", std::to_string(r.kv_bytes_per_token) + " (" +
                                          std::to_string(r.kv_bytes_per_token_per_gpu) + ")");
  row("KV per sequence", Gib(r.kv_bytes_per_sequence));
  row("KV total (no sharing)", Gib(r.kv_bytes_total));
  row("usable memory per GPU", Gib(r.usable_bytes_per_gpu) +
                                   num(in.gpu_memory_utilization, " (x %.2f)"));
  row("activation reserve per GPU", Gib(r.activation_reserve_bytes));
  row("KV memory per GPU", Gib(std::max<int64_t>(0, r.kv_memory_per_gpu)));
  row("KV blocks per GPU", std::to_string(r.num_blocks) + " x " + std::to_string(in.block_size) +
                               " = " + std::to_string(r.kv_capacity_tokens) + " tokens");
  row("blocks needed", std::to_string(r.blocks_needed));
  row("fits", r.fits ? "yes" : "NO");
  row("max concurrency @ context", std::to_string(r.max_concurrency));
  row("max model len @ concurrency", std::to_string(r.max_model_len) +
                                         (r.max_model_len < r.max_model_len_uncapped
                                              ? " (model limit; KV room for " +
                                                    std::to_string(r.max_model_len_uncapped) + ")"
                                              : ""));
  row("decode step, memory bound", num(r.decode.memory_bound_s * 1e3, "%.3f ms"));
  row("decode step, compute bound", num(r.decode.compute_bound_s * 1e3, "%.3f ms"));
  row("bottleneck", r.bottleneck);
  if (r.decode_tokens_per_s > 0) row("decode throughput (roofline)", num(r.decode_tokens_per_s, "%.0f tokens/s"));
  std::fprintf(out, "\nrecommended:\n");
  row("--kv-cache-dtype", std::string(KVCacheDTypeName(rec.kv_cache_dtype)));
  row("--gpu-memory-utilization", num(rec.gpu_memory_utilization, "%.2f"));
  row("--max-model-len", std::to_string(rec.max_model_len));
  if (in.num_gpus > 1) row("--tensor-parallel-size", std::to_string(in.num_gpus));
  row(rec.enable_prefix_caching ? "--enable-prefix-caching" : "--no-enable-prefix-caching", "");
  row("fewest GPUs that fit", rec.min_num_gpus > 0 ? std::to_string(rec.min_num_gpus) : "> 64");
  std::fprintf(out, "\nadvice:\n");
  for (const auto& note : advice.notes) std::fprintf(out, "  - %s\n", note.c_str());
}

std::vector<KVVariant> CompareVariants(const ModelSpec& m) {
  const int64_t layers = m.num_layers;
  const int64_t dk = m.is_mla() ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim;
  const int64_t dv = m.is_mla() ? m.mla.v_head_dim : m.head_dim;
  const int64_t gqa_heads = std::min<int64_t>(8, m.num_heads);
  const int64_t latent = m.is_mla() ? m.mla.kv_lora_rank : 512;
  const int64_t rope = m.is_mla() ? m.mla.qk_rope_head_dim : 64;
  return {{"MHA", {layers, m.num_heads, dk, dv, 0, false}},
          {"GQA-" + std::to_string(gqa_heads), {layers, gqa_heads, dk, dv, 0, false}},
          {"MLA", {layers, 1, latent, 0, rope, true}}};
}

namespace {
constexpr int64_t kContexts[] = {32768, 131072};
constexpr int64_t kBatches[] = {1, 16};
constexpr KVCacheDType kDTypes[] = {KVCacheDType::kBF16, KVCacheDType::kFp8E4M3, KVCacheDType::kInt4};

template <typename Fn>
void ForEachCell(const PlanInputs& base, Fn fn) {
  for (const KVVariant& v : CompareVariants(base.model)) {
    for (KVCacheDType t : kDTypes) {
      for (int64_t ctx : kContexts) {
        for (int64_t batch : kBatches) {
          PlanInputs in = base;
          in.kv_shape = v.shape;
          in.kv_dtype = t;
          in.context = ctx;
          in.input_len = -1;
          in.concurrency = batch;
          fn(v, t, ctx, batch, Plan(in));
        }
      }
    }
  }
}
}  // namespace

json CompareToJson(const PlanInputs& base) {
  json rows = json::array();
  ForEachCell(base, [&](const KVVariant& v, KVCacheDType t, int64_t ctx, int64_t batch,
                        const PlanResult& r) {
    rows.push_back({{"variant", v.name},
                    {"kv_cache_dtype", KVCacheDTypeName(t)},
                    {"context", ctx},
                    {"concurrency", batch},
                    {"kv_bytes_per_token", r.kv_bytes_per_token},
                    {"kv_bytes_total", r.kv_bytes_total},
                    {"fits", r.fits},
                    {"max_concurrency", r.max_concurrency},
                    {"decode_step_seconds",
                     {{"memory_bound", r.decode.memory_bound_s},
                      {"compute_bound", r.decode.compute_bound_s}}}});
  });
  return {{"model", base.model.name},
          {"gpu", base.gpu.name},
          {"num_gpus", base.num_gpus},
          {"weight_dtype", base.weights.name},
          {"rows", rows}};
}

void PrintCompare(std::FILE* out, const PlanInputs& base) {
  std::fprintf(out, "pagoda plan --compare: %s-sized KV variants on %lld x %s (weights %s)\n",
               base.model.name.c_str(), static_cast<long long>(base.num_gpus),
               base.gpu.name.c_str(), base.weights.name.c_str());
  std::fprintf(out,
               "KV total per cell (one copy of the cache; '*' = does not fit; (n) = max "
               "concurrency at that context).\nUnder tensor parallelism MHA/GQA heads are split "
               "across the GPUs; the MLA latent is replicated on each.\n\n");
  std::fprintf(out, "%-8s %-9s %10s | %-20s %-20s | %-20s %-20s\n", "variant", "kv dtype",
               "B/token", "32K x 1", "32K x 16", "128K x 1", "128K x 16");
  std::string line;
  ForEachCell(base, [&](const KVVariant& v, KVCacheDType t, int64_t ctx, int64_t batch,
                        const PlanResult& r) {
    if (ctx == kContexts[0] && batch == kBatches[0]) {
      char head[64];
      std::snprintf(head, sizeof(head), "%-8s %-9s %10lld |", v.name.c_str(),
                    std::string(KVCacheDTypeName(t)).c_str(),
                    static_cast<long long>(r.kv_bytes_per_token));
      line = head;
    }
    char cell[64];
    std::snprintf(cell, sizeof(cell), " %s%s (%lld)", Gib(r.kv_bytes_total).c_str(),
                  r.fits ? "" : "*", static_cast<long long>(r.max_concurrency));
    char padded[64];
    std::snprintf(padded, sizeof(padded), "%-21s", cell);
    line += padded;
    if (batch == kBatches[1] && ctx == kContexts[0]) line += "|";
    if (batch == kBatches[1] && ctx == kContexts[1]) std::fprintf(out, "%s\n", line.c_str());
  });
}

}  // namespace pagoda
