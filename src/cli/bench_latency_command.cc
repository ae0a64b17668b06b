// pagoda bench latency: prefill and decode speed of one sequence, beside the bounds of
// this machine measured in the same run (memory bandwidth for decode, the dot-product
// peak for prefill), as the issue "CPU speed at the memory roof" asks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "core/progress_bar.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/roofline.h"
#include "kv/kv_layout.h"

namespace pagoda::cli {
namespace {

struct LatencyFlags {
  ModelFlags model;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t num_iters = 3;
  bool json = false;
};

using Seconds = std::chrono::duration<double>;

struct Timing {
  double prefill_s = 0;
  double decode_s = 0;
};

// One sequence: prefill input_len tokens in one forward, then output_len single-token steps.
Timing RunOnce(Model& model, DType kv_dtype, int64_t block_size, int64_t input_len, int64_t output_len,
               ProgressBar* bar, int64_t* progress) {
  const int64_t total = input_len + output_len;
  const int64_t blocks = (total + block_size - 1) / block_size;
  KVStorage cache(model.KVShapeFor(blocks, block_size, kv_dtype));
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  const int64_t vocab = model.spec().vocab_size;
  std::vector<float> logits(vocab);
  auto batch_for = [&](int64_t start, int64_t n) {
    ForwardBatch b;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = start + i;
      b.token_ids.push_back(static_cast<int32_t>(1 + (pos * 7919) % (vocab - 1)));
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(int64_t{table[pos / block_size]} * block_size + pos % block_size);
      b.block_tables.push_back(table.data());
    }
    b.logits_indices.push_back(static_cast<int32_t>(n - 1));
    return b;
  };
  Timing t;
  ForwardBatch prefill = batch_for(0, input_len);
  auto t0 = std::chrono::steady_clock::now();
  model.Forward(prefill, cache, logits.data());
  t.prefill_s = Seconds(std::chrono::steady_clock::now() - t0).count();
  bar->Update(*progress += input_len);
  for (int64_t i = 0; i < output_len; ++i) {
    ForwardBatch step = batch_for(input_len + i, 1);
    t0 = std::chrono::steady_clock::now();
    model.Forward(step, cache, logits.data());
    t.decode_s += Seconds(std::chrono::steady_clock::now() - t0).count();
    bar->Update(++*progress);
  }
  return t;
}

int RunLatency(const LatencyFlags& f) {
  PAGODA_ENSURE(f.input_len >= 1 && f.output_len >= 1 && f.num_iters >= 1, ErrorCode::kInvalidArgument,
                "--input-len, --output-len and --num-iters must be at least 1");
  auto model = f.model.LoadModel();
  const ModelSpec& spec = model->spec();
  PAGODA_ENSURE(f.input_len + f.output_len <= spec.max_position || f.model.max_model_len > 0,
                ErrorCode::kInvalidArgument,
                "--input-len + --output-len (" << f.input_len + f.output_len << ") exceeds the model's context "
                                               << spec.max_position << " (pass --max-model-len to override)");
  const DType kv_dtype = f.model.KVDType(*model);
  PAGODA_LOG(kInfo) << "bench latency: " << spec.name << ", " << NumThreads() << " threads, matmul "
                    << MatMulIsaName() << ", warm-up run, then the machine's bounds around the timed runs";
  ProgressBar bar("bench latency", (f.num_iters + 1) * (f.input_len + f.output_len));
  int64_t progress = 0;
  RunOnce(*model, kv_dtype, f.model.block_size, f.input_len, f.output_len, &bar, &progress);  // warm-up
  // The bounds are measured on the machine the warm-up left (clocks as under the timed
  // runs, not a rested machine's short turbo), then again after the runs.
  const RooflineBounds before = MeasureRoofline();
  Timing best{1e30, 1e30};
  for (int64_t i = 0; i < f.num_iters; ++i) {
    const Timing t = RunOnce(*model, kv_dtype, f.model.block_size, f.input_len, f.output_len, &bar, &progress);
    best.prefill_s = std::min(best.prefill_s, t.prefill_s);
    best.decode_s = std::min(best.decode_s, t.decode_s);
  }
  bar.Finish();
  // The higher of the two readings is used: on a shared or throttling host a single probe
  // can land in a slow moment and flatter the ratios.
  const RooflineBounds after = MeasureRoofline();
  RooflineBounds bounds = before;
  bounds.read_gbs = std::max(before.read_gbs, after.read_gbs);
  bounds.fma_gflops = std::max(before.fma_gflops, after.fma_gflops);
  bounds.bf16_gflops = std::max(before.bf16_gflops, after.bf16_gflops);
  bounds.int8_gops = std::max(before.int8_gops, after.int8_gops);

  const double prefill_tps = f.input_len / best.prefill_s;
  const double decode_tps = f.output_len / best.decode_s;
  // Decode reads every weight once per token, plus the KV cache of the context so far.
  const KVCacheDType kv_format = kv_dtype == DType::kF32   ? KVCacheDType::kF32
                                 : kv_dtype == DType::kF16 ? KVCacheDType::kF16
                                                           : KVCacheDType::kBF16;
  const int64_t kv_bytes = KVBytesPerToken(spec.kv_shape(), kv_format);
  const double mean_context = f.input_len + (f.output_len - 1) / 2.0;
  const double bytes_per_token = static_cast<double>(model->WeightBytesPerToken()) + kv_bytes * mean_context;
  const double decode_bound = bounds.read_gbs * 1e9 / bytes_per_token;
  // Prefill: 2 flops per active parameter per token, plus attention (QK^T and PV); the
  // classifier runs for the last prompt token only (its share is spread over the prompt).
  const double attn_flops = 4.0 * spec.num_layers * spec.num_heads * spec.head_dim * (f.input_len + 1) / 2.0;
  const double classifier = static_cast<double>(spec.vocab_size) * spec.dim;
  const double flops_per_token = 2.0 * (static_cast<double>(spec.NumActiveParameters()) - classifier) +
                                 2.0 * classifier / f.input_len + attn_flops;
  const bool int8_path = spec.weight_dtype == DType::kQ8_0 || spec.weight_dtype == DType::kQ4_0;
  const double peak_gflops = int8_path && bounds.int8_gops > 0 ? bounds.int8_gops : bounds.fma_gflops;
  const double prefill_bound = peak_gflops * 1e9 / flops_per_token;

  if (f.json) {
    nlohmann::json out = {
        {"model", spec.name}, {"weight_dtype", DTypeName(spec.weight_dtype)}, {"threads", NumThreads()},
        {"matmul_isa", MatMulIsaName()}, {"input_len", f.input_len}, {"output_len", f.output_len},
        {"prefill_tokens_per_s", prefill_tps}, {"decode_tokens_per_s", decode_tps},
        {"prefill_seconds", best.prefill_s}, {"decode_seconds", best.decode_s},
        {"weight_bytes_per_token", model->WeightBytesPerToken()}, {"decode_bytes_per_token", bytes_per_token},
        {"flops_per_prefill_token", flops_per_token},
        {"bounds", {{"read_gbs", bounds.read_gbs}, {"fma_gflops", bounds.fma_gflops},
                    {"bf16_gflops", bounds.bf16_gflops}, {"int8_gops", bounds.int8_gops},
                    {"prefill_peak_used", int8_path ? "int8" : "fma"}}},
        {"bounds_before", {{"read_gbs", before.read_gbs}, {"fma_gflops", before.fma_gflops},
                           {"int8_gops", before.int8_gops}}},
        {"bounds_after", {{"read_gbs", after.read_gbs}, {"fma_gflops", after.fma_gflops},
                          {"int8_gops", after.int8_gops}}},
        {"decode_bound_tokens_per_s", decode_bound}, {"prefill_bound_tokens_per_s", prefill_bound},
        {"decode_fraction_of_bound", decode_tps / decode_bound},
        {"prefill_fraction_of_bound", prefill_tps / prefill_bound}};
    std::cout << out.dump(2) << std::endl;
  } else {
    std::printf("model %s (%s), %d threads, matmul %s\n", spec.name.c_str(),
                std::string(DTypeName(spec.weight_dtype)).c_str(), NumThreads(), std::string(MatMulIsaName()).c_str());
    std::printf("bounds measured before / after the runs (the higher is used): read %.1f / %.1f GB/s, "
                "FMA %.1f / %.1f GFLOP/s, int8 %.1f / %.1f GOP/s\n",
                before.read_gbs, after.read_gbs, before.fma_gflops, after.fma_gflops, before.int8_gops,
                after.int8_gops);
    std::printf("%-8s %12s %14s %10s\n", "phase", "tokens/s", "bound tok/s", "of bound");
    std::printf("%-8s %12.1f %14.1f %9.1f%%\n", "prefill", prefill_tps, prefill_bound, 100 * prefill_tps / prefill_bound);
    std::printf("%-8s %12.1f %14.1f %9.1f%%\n", "decode", decode_tps, decode_bound, 100 * decode_tps / decode_bound);
  }
  return 0;
}

}  // namespace

void AddBenchLatencyCommand(CLI::App* bench, Action* action) {
  auto flags = std::make_shared<LatencyFlags>();
  CLI::App* app = bench->add_subcommand("latency", "prefill and decode speed of one sequence vs this machine's bounds");
  flags->model.Add(app);
  app->add_option("--input-len", flags->input_len, "prompt tokens")->capture_default_str();
  app->add_option("--output-len", flags->output_len, "decoded tokens")->capture_default_str();
  app->add_option("--num-iters", flags->num_iters, "timed repetitions (best is reported)")->capture_default_str();
  app->add_flag("--json", flags->json, "print one JSON object on stdout");
  app->callback([flags, action] { *action = [flags] { return RunLatency(*flags); }; });
}

}  // namespace pagoda::cli
