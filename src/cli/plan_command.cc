// `pagoda plan`: the KV memory planner and deployment advisor (docs/planning.md).
//
//   pagoda plan --model llama-3-8b --gpu h200 --context 128K --concurrency 16 [--json]
//   pagoda plan --compare --model deepseek-v3 --gpu h200 --num-gpus 8
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "kv/kv_cache_config.h"
#include "plan/advisor.h"
#include "plan/gpu_presets.h"
#include "plan/model_source.h"
#include "plan/planner.h"
#include "plan/report.h"

namespace pagoda::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::string gpu;
  std::string gpu_memory;     // "80GiB", "141GB", bytes (kv/kv_cache_config.h's sizes)
  double gpu_bandwidth = 0;   // GB/s
  double gpu_tflops = 0;      // dense bf16
  double gpu_fp8_tflops = -1; // dense fp8; -1: 2x bf16 when --gpu-tflops is given
  int64_t num_gpus = 1;
  int64_t concurrency = 1;
  std::string context;  // "131072", "128K"
  std::string input_len;
  std::string output_len;
  std::string kv_cache_dtype = "auto";
  std::string weight_dtype = "auto";
  int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_memory;
  double prefix_share = 0;
  int64_t max_num_batched_tokens = 8192;
  int64_t kv_quant_group_size = 32;
  bool compare = false;
  bool json = false;
};

// "128K" = 131072 (K and M are powers of two, as context lengths are), or a plain count.
int64_t ParseTokens(const std::string& text, const char* flag) {
  size_t pos = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &pos);
  } catch (const std::exception&) {
    ThrowInvalidArgument(std::string(flag) + ": expected a token count such as 4096 or 128K, got '" + text + "'");
  }
  const std::string suffix = text.substr(pos);
  if (suffix == "K" || suffix == "k") return value * 1024;
  if (suffix == "M" || suffix == "m") return value * 1024 * 1024;
  if (!suffix.empty()) ThrowInvalidArgument(std::string(flag) + ": bad suffix in '" + text + "'");
  return value;
}

GpuSpec ResolveGpu(const PlanFlags& f) {
  GpuSpec g;
  if (!f.gpu.empty()) {
    g = GetGpuPreset(f.gpu);
  } else {
    PAGODA_ENSURE(!f.gpu_memory.empty() && f.gpu_bandwidth > 0 && f.gpu_tflops > 0,
                  ErrorCode::kInvalidArgument,
                  "give --gpu (a preset) or all of --gpu-memory, --gpu-bandwidth and --gpu-tflops");
    g.name = "custom";
  }
  if (!f.gpu_memory.empty()) g.memory_bytes = ParseMemorySize(f.gpu_memory, "--gpu-memory");
  if (f.gpu_bandwidth > 0) g.memory_bandwidth = f.gpu_bandwidth * 1e9;
  if (f.gpu_tflops > 0) {
    g.bf16_flops = f.gpu_tflops * 1e12;
    g.fp8_flops = 2 * g.bf16_flops;
  }
  if (f.gpu_fp8_tflops >= 0) g.fp8_flops = f.gpu_fp8_tflops * 1e12;
  return g;
}

KVCacheDType ModelDefaultKV(const ModelSpec& m) {
  if (m.weight_dtype == DType::kF32) return KVCacheDType::kF32;
  if (m.weight_dtype == DType::kF16) return KVCacheDType::kF16;
  return KVCacheDType::kBF16;
}

PlanInputs BuildInputs(const PlanFlags& f) {
  PlanInputs in;
  in.model = ResolvePlanModel(f.model);
  in.gpu = ResolveGpu(f);
  in.num_gpus = f.num_gpus;
  in.concurrency = f.concurrency;
  const bool split = !f.input_len.empty() || !f.output_len.empty();
  if (split) {
    PAGODA_ENSURE(!f.input_len.empty() && !f.output_len.empty(), ErrorCode::kInvalidArgument,
                  "--input-len and --output-len go together");
    in.input_len = ParseTokens(f.input_len, "--input-len");
    const int64_t total = in.input_len + ParseTokens(f.output_len, "--output-len");
    if (!f.context.empty()) {
      PAGODA_ENSURE(ParseTokens(f.context, "--context") == total, ErrorCode::kInvalidArgument,
                    "--context differs from --input-len + --output-len (" << total << ")");
    }
    in.context = total;
  } else {
    in.context = f.context.empty() ? in.model.max_position : ParseTokens(f.context, "--context");
  }
  in.kv_dtype = ParseKVCacheDType(f.kv_cache_dtype, ModelDefaultKV(in.model));
  in.kv_options.group_size = f.kv_quant_group_size;
  PAGODA_ENSURE(f.kv_quant_group_size > 0, ErrorCode::kInvalidArgument,
                "--kv-quant-group-size must be positive");
  in.weights = ParseWeightFormat(f.weight_dtype, in.model.weight_dtype);
  in.block_size = f.block_size;
  in.gpu_memory_utilization = f.gpu_memory_utilization;
  if (!f.kv_cache_memory.empty()) in.kv_cache_memory_bytes = ParseMemorySize(f.kv_cache_memory, "--kv-cache-memory");
  in.prefix_share = f.prefix_share;
  in.max_num_batched_tokens = f.max_num_batched_tokens;
  return in;
}

int RunPlan(const PlanFlags& f) {
  const PlanInputs in = BuildInputs(f);
  if (f.compare) {
    if (f.json) {
      std::cout << CompareToJson(in).dump(2) << "\n";
    } else {
      PrintCompare(stdout, in);
    }
    return 0;
  }
  const PlanResult plan = Plan(in);
  const Advice advice = Advise(in, plan);
  if (f.json) {
    std::cout << PlanToJson(in, plan, advice).dump(2) << "\n";
  } else {
    PrintPlan(stdout, in, plan, advice);
  }
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& root, Action* action) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = root.add_subcommand(
      "plan", "KV memory planner: will a model fit on a GPU, what is the bottleneck, which settings");
  cmd->add_option("--model", flags->model,
                  "a preset (llama-3-8b, deepseek-v3, ...), dummy:<preset>, a .gguf, a config.json "
                  "or a Hugging Face directory")
      ->required();
  cmd->add_option("--gpu", flags->gpu, "h100, h200, b200, a100-80gb, a100-40gb, l4, rtx-4090");
  cmd->add_option("--gpu-memory", flags->gpu_memory, "GPU memory, e.g. 80GiB (overrides --gpu)");
  cmd->add_option("--gpu-bandwidth", flags->gpu_bandwidth, "memory bandwidth in GB/s");
  cmd->add_option("--gpu-tflops", flags->gpu_tflops, "dense bf16 TFLOP/s");
  cmd->add_option("--gpu-fp8-tflops", flags->gpu_fp8_tflops, "dense fp8 TFLOP/s (0: none)");
  cmd->add_option("--num-gpus,--tensor-parallel-size", flags->num_gpus,
                  "tensor-parallel GPUs (serve's --tensor-parallel-size)")
      ->capture_default_str();
  cmd->add_option("--concurrency", flags->concurrency, "concurrent requests")->capture_default_str();
  cmd->add_option("--context", flags->context,
                  "tokens per request (prompt + output), e.g. 131072 or 128K; default: the "
                  "model's max positions");
  cmd->add_option("--input-len", flags->input_len, "prompt tokens (with --output-len)");
  cmd->add_option("--output-len", flags->output_len, "generated tokens (with --input-len)");
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "auto|bf16|fp16|fp8|fp8_e4m3|fp8_e5m2|int8|int4|nvfp4|kivi2")
      ->capture_default_str();
  cmd->add_option("--kv-quant-group-size", flags->kv_quant_group_size, "int8/int4/kivi2 group")
      ->capture_default_str();
  cmd->add_option("--weight-dtype", flags->weight_dtype,
                  "auto|bf16|fp16|f32|fp8|int8|int4|q8_0|q4_0|q4_k|q5_k|q6_k")
      ->capture_default_str();
  cmd->add_option("--block-size", flags->block_size, "tokens per KV block")->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", flags->gpu_memory_utilization,
                  "fraction of GPU memory the engine may use")
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "KV cache size per GPU, e.g. 40GiB (instead of deriving it)");
  cmd->add_option("--prefix-share", flags->prefix_share,
                  "fraction of prompt tokens all requests share, 0..1")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                  "tokens per forward pass (sizes the activation reserve)")
      ->capture_default_str();
  cmd->add_flag("--compare", flags->compare,
                "table of 32K/128K x batch 1/16 in bf16/fp8/int4 for MHA, GQA and MLA variants");
  cmd->add_flag("--json", flags->json, "print one JSON object on stdout");
  cmd->callback([flags, action] { *action = [flags] { return RunPlan(*flags); }; });
}

}  // namespace pagoda::cli
