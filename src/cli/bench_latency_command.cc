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
#include "core/op_profile.h"
#include "core/parallel.h"
#include "core/progress_bar.h"
#include "kernels/cpu/matmul.h"
#include "kv/kv_layout.h"
#include "probe/roofline.h"

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

// One timed iteration: the prefill between two readings of the compute peaks (best of 3
// passes each) and with single passes of the FMA and int8 peaks between its layers
// (kPrefillProbePasses, evenly spaced, outside the prefill's time); the decode between two
// readings of the read bandwidth (best of 5 passes each) and with single read passes between
// its steps (kDecodeProbePasses, evenly spaced). A shared host changes speed within a second
// (a busy sibling hyperthread halves the dot-product peak), so each phase is compared with the
// machine as it was during it: its bound is the mean rate of the interleaved passes (their
// work over their time, as the phase's speed is its tokens over its time). The readings just
// before and after are reported beside it.
constexpr int64_t kDecodeProbePasses = 8;
constexpr int64_t kPrefillProbePasses = 8;

// The mean rate of equal-work passes (their work over their time): the harmonic mean.
double MeanRate(const std::vector<double>& rates) {
  double inv = 0;
  for (double x : rates) {
    if (x <= 0) return 0;
    inv += 1 / x;
  }
  return rates.empty() ? 0 : static_cast<double>(rates.size()) / inv;
}

struct Run {
  double prefill_s = 0, decode_s = 0;
  RooflineBounds prefill_before, prefill_after, decode_before, decode_after;
  double interleaved_probe_s = 0, interleaved_probe_bytes = 0;  // the passes between decode steps
  std::vector<double> interleaved_gbs;                         // each pass
  std::vector<double> prefill_fma_passes, prefill_int8_passes;  // GFLOP/s, GOP/s between its layers
  OpProfile prefill_profile, decode_profile;                   // time by kernel kind
  double interleaved_gbs_mean() const {
    return interleaved_probe_s > 0 ? interleaved_probe_bytes / interleaved_probe_s / 1e9 : 0;
  }
  double prefill_fma_mean() const { return MeanRate(prefill_fma_passes); }
  double prefill_int8_mean() const { return MeanRate(prefill_int8_passes); }
};

// One sequence: prefill input_len tokens in one forward, then output_len single-token steps.
// `probes`: measure the bounds around the phases (timed runs), else only run (warm-up).
Run RunOnce(Model& model, DType kv_dtype, int64_t block_size, int64_t input_len, int64_t output_len,
            ReadProbe* probes, ProgressBar* bar, int64_t* progress) {
  const int64_t total = input_len + output_len;
  const int64_t blocks = (total + block_size - 1) / block_size;
  std::unique_ptr<KVCache> cache = model.backend().CreateKVCache(model.KVShapeFor(blocks, block_size, kv_dtype));
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  const int64_t vocab = model.spec().vocab_size;
  std::vector<float> logits(vocab);
  std::vector<int32_t> tokens(total);
  for (int64_t pos = 0; pos < total; ++pos) tokens[pos] = static_cast<int32_t>(1 + (pos * 7919) % (vocab - 1));
  model.ReserveWorkspace(input_len, 1);
  StepBuilder builder;
  Run r;
  if (probes) r.prefill_before = MeasureComputePeaks();
  // Single peak passes at the entry of evenly spaced layers, their time taken out of the
  // prefill's (they are outside every kernel timer, so "other" stays the framework's).
  const int64_t layers = model.spec().num_layers;
  const int64_t samples = std::min(kPrefillProbePasses, layers);
  double probe_s = 0;
  ForwardObserver observer;
  observer.on_hidden = [&](int64_t layer, const float*, int64_t, int64_t) {
    if (layer >= layers || (layer + 1) * samples / layers == layer * samples / layers) return;
    const auto p0 = std::chrono::steady_clock::now();
    r.prefill_fma_passes.push_back(MeasurePeakFmaGflops(1));
    r.prefill_int8_passes.push_back(MeasurePeakInt8Gops(1));
    probe_s += Seconds(std::chrono::steady_clock::now() - p0).count();
  };
  TakeOpProfile();
  auto t0 = std::chrono::steady_clock::now();
  ForwardSequence(model, *cache, builder, tokens, 0, input_len, table, LogitRows::kLast, logits.data(),
                  probes ? &observer : nullptr);
  r.prefill_s = Seconds(std::chrono::steady_clock::now() - t0).count() - probe_s;
  r.prefill_profile = TakeOpProfile();
  if (probes) {
    r.prefill_after = MeasureComputePeaks();
    r.decode_before.read_gbs = probes->BestGBs(5);
  }
  bar->Update(*progress += input_len);
  TakeOpProfile();
  const int64_t passes = std::min(kDecodeProbePasses, output_len);
  for (int64_t i = 0; i < output_len; ++i) {
    t0 = std::chrono::steady_clock::now();
    ForwardSequence(model, *cache, builder, tokens, input_len + i, 1, table, LogitRows::kLast, logits.data());
    r.decode_s += Seconds(std::chrono::steady_clock::now() - t0).count();
    // A pass after the steps that end each of `passes` equal stretches of the decode (outside
    // the decode's time and its kernel timers).
    if (probes && (i + 1) * passes / output_len != i * passes / output_len) {
      const double s = probes->PassSeconds();
      r.interleaved_probe_s += s;
      r.interleaved_probe_bytes += static_cast<double>(probes->bytes());
      r.interleaved_gbs.push_back(probes->bytes() / s / 1e9);
    }
    bar->Update(++*progress);
  }
  r.decode_profile = TakeOpProfile();
  if (probes) r.decode_after.read_gbs = probes->BestGBs(5);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Seconds, share of the phase and arithmetic rate per kernel kind; "other" is the phase's
// time outside every timed kernel (embedding lookup, copies, the framework).
nlohmann::json ProfileJson(const OpProfile& p, double phase_s) {
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
    if (p.calls[i] == 0) continue;
    nlohmann::json k = {{"seconds", p.seconds[i]}, {"share", p.seconds[i] / phase_s}, {"calls", p.calls[i]}};
    if (p.ops[i] > 0) k["gops_per_s"] = p.ops[i] / p.seconds[i] * 1e-9;
    out[std::string(OpKindName(static_cast<OpKind>(i)))] = k;
  }
  out["other"] = {{"seconds", phase_s - p.total_seconds()}, {"share", 1 - p.total_seconds() / phase_s}};
  return out;
}

void PrintProfiles(const Run& t) {
  std::printf("time by kernel (median run) prefill share  G op/s   decode share  G op/s\n");
  auto cell = [](const OpProfile& p, double phase_s, int i) {
    char buf[64];
    const double s = i < 0 ? phase_s - p.total_seconds() : p.seconds[i];
    const double ops = i < 0 ? 0 : p.ops[i];
    if (ops > 0) {
      std::snprintf(buf, sizeof buf, "%12.1f%% %7.1f", 100 * s / phase_s, ops / s * 1e-9);
    } else {
      std::snprintf(buf, sizeof buf, "%12.1f%% %7s", 100 * s / phase_s, "");
    }
    return std::string(buf);
  };
  for (int i = -1; i < static_cast<int>(OpKind::kCount); ++i) {
    if (i >= 0 && t.prefill_profile.calls[i] == 0 && t.decode_profile.calls[i] == 0) continue;
    const std::string name = i < 0 ? "other" : std::string(OpKindName(static_cast<OpKind>(i)));
    std::printf("  %-24s%s %s\n", name.c_str(), cell(t.prefill_profile, t.prefill_s, i).c_str(),
                cell(t.decode_profile, t.decode_s, i).c_str());
  }
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
  // The warm-up leaves the clocks as under load (a rested machine's short turbo would
  // overstate the peaks), then every timed run is measured between its own probes.
  RunOnce(*model, kv_dtype, f.model.block_size, f.input_len, f.output_len, nullptr, &bar, &progress);
  ReadProbe probe;  // allocated and first touched once for every run's readings
  std::vector<Run> runs;
  EnableOpProfile(true);
  for (int64_t i = 0; i < f.num_iters; ++i) {
    runs.push_back(RunOnce(*model, kv_dtype, f.model.block_size, f.input_len, f.output_len, &probe, &bar, &progress));
  }
  EnableOpProfile(false);
  bar.Finish();

  // Decode reads every weight once per token, plus the KV cache of the context so far.
  const KVCacheDType kv_format = kv_dtype == DType::kF32   ? KVCacheDType::kF32
                                 : kv_dtype == DType::kF16 ? KVCacheDType::kF16
                                                           : KVCacheDType::kBF16;
  const int64_t kv_bytes = KVBytesPerToken(spec.kv_shape(), kv_format);
  const double mean_context = f.input_len + (f.output_len - 1) / 2.0;
  const double bytes_per_token = static_cast<double>(model->WeightBytesPerToken()) + kv_bytes * mean_context;
  // Prefill: 2 ops per active parameter per token in the weight GEMMs (the classifier runs
  // for the last prompt token only: its share is spread over the prompt), plus attention
  // (QK^T and PV over the causal context). Each at the peak of the instruction that runs it:
  // the GEMMs at the int8 peak (vpdpbusd) for Q8_0/Q4_0 weights, else at the f32 FMA peak;
  // attention always at the FMA peak (K/V are floats). The single-peak bound (everything at
  // the GEMMs' peak) is reported beside it.
  const double attn_flops = 4.0 * spec.num_layers * spec.num_heads * spec.head_dim * (f.input_len + 1) / 2.0;
  const double classifier = static_cast<double>(spec.vocab_size) * spec.dim;
  const double gemm_ops = 2.0 * (static_cast<double>(spec.NumActiveParameters()) - classifier) +
                          2.0 * classifier / f.input_len;
  const double flops_per_token = gemm_ops + attn_flops;
  const bool int8_path = spec.weight_dtype == DType::kQ8_0 || spec.weight_dtype == DType::kQ4_0;
  // Each run's bounds: the mean rate of the passes during its phase. Beside it, the bound at
  // the higher of the readings just before and just after the phase (the method before the
  // interleaved passes: a fast moment outside the phase raises it).
  auto gemm_peak = [&](const RooflineBounds& b) { return int8_path && b.int8_gops > 0 ? b.int8_gops : b.fma_gflops; };
  struct Phase {
    std::vector<double> tps, bound, fraction, single_peak_fraction, best_probe_fraction;
  } pre, dec;
  for (const Run& r : runs) {
    const double int8_mean = r.prefill_int8_mean(), fma_mean = r.prefill_fma_mean();
    const double gemm = (int8_path && int8_mean > 0 ? int8_mean : fma_mean) * 1e9;
    const double fma = fma_mean * 1e9;
    pre.tps.push_back(f.input_len / r.prefill_s);
    pre.bound.push_back(1.0 / (gemm_ops / gemm + attn_flops / fma));
    pre.single_peak_fraction.push_back(pre.tps.back() / (gemm / flops_per_token));
    const double gemm_best = std::max(gemm_peak(r.prefill_before), gemm_peak(r.prefill_after)) * 1e9;
    const double fma_best = std::max(r.prefill_before.fma_gflops, r.prefill_after.fma_gflops) * 1e9;
    pre.best_probe_fraction.push_back(pre.tps.back() * (gemm_ops / gemm_best + attn_flops / fma_best));
    dec.tps.push_back(f.output_len / r.decode_s);
    dec.bound.push_back(r.interleaved_gbs_mean() * 1e9 / bytes_per_token);
    pre.fraction.push_back(pre.tps.back() / pre.bound.back());
    dec.fraction.push_back(dec.tps.back() / dec.bound.back());
    // Against the best pass read just before or just after the decode (the method before the
    // interleaved passes): a fast moment outside the decode raises this bound.
    const double best_bound = std::max(r.decode_before.read_gbs, r.decode_after.read_gbs) * 1e9 / bytes_per_token;
    dec.best_probe_fraction.push_back(dec.tps.back() / best_bound);
  }
  // The run whose prefill fraction is the median carries the time-by-kernel table.
  std::vector<size_t> order(runs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pre.fraction[a] < pre.fraction[b]; });
  const Run& mid = runs[order[(order.size() - 1) / 2]];

  if (f.json) {
    nlohmann::json per_run = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      per_run.push_back({{"prefill_tokens_per_s", pre.tps[i]}, {"prefill_bound_tokens_per_s", pre.bound[i]},
                         {"prefill_fraction_of_bound", pre.fraction[i]},
                         {"prefill_fraction_of_single_peak_bound", pre.single_peak_fraction[i]},
                         {"prefill_fraction_of_best_probe_bound", pre.best_probe_fraction[i]},
                         {"fma_gflops_interleaved_passes", r.prefill_fma_passes},
                         {"int8_gops_interleaved_passes", r.prefill_int8_passes},
                         {"fma_gflops_interleaved_mean", r.prefill_fma_mean()},
                         {"int8_gops_interleaved_mean", r.prefill_int8_mean()},
                         {"decode_tokens_per_s", dec.tps[i]},
                         {"decode_bound_tokens_per_s", dec.bound[i]}, {"decode_fraction_of_bound", dec.fraction[i]},
                         {"decode_fraction_of_best_probe_bound", dec.best_probe_fraction[i]},
                         {"read_gbs_interleaved_mean", r.interleaved_gbs_mean()},
                         {"read_gbs_interleaved_passes", r.interleaved_gbs},
                         {"fma_gflops_before_after", {r.prefill_before.fma_gflops, r.prefill_after.fma_gflops}},
                         {"bf16_gflops_before_after", {r.prefill_before.bf16_gflops, r.prefill_after.bf16_gflops}},
                         {"int8_gops_before_after", {r.prefill_before.int8_gops, r.prefill_after.int8_gops}},
                         {"read_gbs_before_after", {r.decode_before.read_gbs, r.decode_after.read_gbs}},
                         {"prefill_time_by_kernel", ProfileJson(r.prefill_profile, r.prefill_s)},
                         {"decode_time_by_kernel", ProfileJson(r.decode_profile, r.decode_s)}});
    }
    nlohmann::json out = {
        {"model", spec.name}, {"weight_dtype", DTypeName(spec.weight_dtype)}, {"threads", NumThreads()},
        {"matmul_isa", MatMulIsaName()}, {"input_len", f.input_len}, {"output_len", f.output_len},
        {"weight_bytes_per_token", model->WeightBytesPerToken()}, {"decode_bytes_per_token", bytes_per_token},
        {"flops_per_prefill_token", flops_per_token}, {"gemm_ops_per_prefill_token", gemm_ops},
        {"attention_flops_per_prefill_token", attn_flops}, {"gemm_peak_used", int8_path ? "int8" : "fma"},
        {"prefill_fraction_of_single_peak_bound", Median(pre.single_peak_fraction)},
        {"prefill_tokens_per_s", Median(pre.tps)}, {"prefill_bound_tokens_per_s", Median(pre.bound)},
        {"prefill_fraction_of_bound", Median(pre.fraction)},
        {"prefill_fraction_of_best_probe_bound", Median(pre.best_probe_fraction)},
        {"decode_tokens_per_s", Median(dec.tps)},
        {"decode_bound_tokens_per_s", Median(dec.bound)}, {"decode_fraction_of_bound", Median(dec.fraction)},
        {"decode_fraction_of_best_probe_bound", Median(dec.best_probe_fraction)}, {"runs", per_run}};
    std::cout << out.dump(2) << std::endl;
  } else {
    std::printf("model %s (%s), %d threads, matmul %s; medians of %zu runs, prefill against the compute peak "
                "passes between its layers, decode against the read passes between its steps\n",
                spec.name.c_str(), std::string(DTypeName(spec.weight_dtype)).c_str(), NumThreads(),
                std::string(MatMulIsaName()).c_str(), runs.size());
    std::printf("%-8s %12s %14s %10s   %s\n", "phase", "tokens/s", "bound tok/s", "of bound", "runs (of bound)");
    auto line = [](const char* name, const Phase& p) {
      std::string each;
      for (double x : p.fraction) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.1f%%", 100 * x);
        each += buf;
      }
      std::printf("%-8s %12.1f %14.1f %9.1f%%  %s\n", name, Median(p.tps), Median(p.bound), 100 * Median(p.fraction),
                  each.c_str());
    };
    line("prefill", pre);
    line("decode", dec);
    std::printf("  prefill bound: GEMMs at the %s peak, attention at the FMA peak, each at the mean rate of %lld "
                "passes between the layers (all at the %s peak: %.1f%%; against the best readings before or after "
                "the prefill: %.1f%%)\n",
                int8_path ? "int8" : "FMA", static_cast<long long>(std::min(kPrefillProbePasses, spec.num_layers)),
                int8_path ? "int8" : "FMA", 100 * Median(pre.single_peak_fraction),
                100 * Median(pre.best_probe_fraction));
    std::printf("  decode bound: weights + KV bytes at the mean read rate of %lld passes between the steps "
                "(against the best pass before or after the decode: %.1f%%)\n",
                static_cast<long long>(std::min(kDecodeProbePasses, f.output_len)), 100 * Median(dec.best_probe_fraction));
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      std::printf("  run %zu bounds: FMA %.0f, int8 %.0f during the prefill (best %.0f/%.0f GFLOP/s, %.0f/%.0f GOP/s "
                  "before/after); read %.1f GB/s during the decode (best %.1f/%.1f before/after)\n",
                  i + 1, r.prefill_fma_mean(), r.prefill_int8_mean(), r.prefill_before.fma_gflops,
                  r.prefill_after.fma_gflops, r.prefill_before.int8_gops, r.prefill_after.int8_gops,
                  r.interleaved_gbs_mean(), r.decode_before.read_gbs, r.decode_after.read_gbs);
    }
    PrintProfiles(mid);
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
  app->add_option("--num-iters", flags->num_iters, "timed repetitions (medians are reported)")->capture_default_str();
  app->add_flag("--json", flags->json, "print one JSON object on stdout");
  app->callback([flags, action] { *action = [flags] { return RunLatency(*flags); }; });
}

}  // namespace pagoda::cli
