#include "plan/advisor.h"

#include <algorithm>
#include <cstdio>

namespace pagoda {
namespace {

std::string Fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c);
  return buf;
}

std::string Name(KVCacheDType t) { return std::string(KVCacheDTypeName(t)); }

bool IsWide(KVCacheDType t) {
  return t == KVCacheDType::kBF16 || t == KVCacheDType::kF16 || t == KVCacheDType::kF32;
}
bool IsFourBitOrLess(KVCacheDType t) {
  return t == KVCacheDType::kInt4 || t == KVCacheDType::kNvfp4 || t == KVCacheDType::kKivi2;
}

PlanResult PlanWith(PlanInputs in, KVCacheDType dtype, double util) {
  in.kv_dtype = dtype;
  in.gpu_memory_utilization = util;
  return Plan(in);
}

int64_t MinNumGpus(PlanInputs in, KVCacheDType dtype) {
  in.kv_dtype = dtype;
  in.kv_cache_memory_bytes = -1;
  for (int64_t g = 1; g <= 64; g *= 2) {
    if (in.model.num_heads % g != 0) break;
    const KVShape shape = in.kv_shape.value_or(in.model.kv_shape());
    if (!shape.mla && shape.num_kv_heads % g != 0 && g % shape.num_kv_heads != 0) break;
    in.num_gpus = g;
    if (Plan(in).fits) return g;
  }
  return 0;
}

void CapacityNotes(const PlanInputs& in, const PlanResult& r, std::vector<std::string>& notes) {
  notes.push_back(
      "KV cache: " + Fmt("%.0f bytes per token", static_cast<double>(r.kv_bytes_per_token)) + " (" +
      Name(in.kv_dtype) + "), " + FormatBytes(r.kv_bytes_per_sequence) + " per sequence of " +
      std::to_string(in.context) + " tokens, " + FormatBytes(r.kv_bytes_total) + " for " +
      std::to_string(in.concurrency) + " requests; each GPU has room for " +
      std::to_string(r.num_blocks) + " blocks x " + std::to_string(in.block_size) + " = " +
      std::to_string(r.kv_capacity_tokens) + " tokens (" + FormatBytes(std::max<int64_t>(0, r.kv_memory_per_gpu)) +
      ")" + (r.fits ? ": it fits." : ": it does NOT fit (needs " + std::to_string(r.blocks_needed) + " blocks)."));
  if (!r.weights_fit) {
    notes.push_back("The weights alone (" + FormatBytes(r.weight_bytes_per_gpu) +
                    " per GPU in " + in.weights.name + ") plus the activation reserve (" +
                    FormatBytes(r.activation_reserve_bytes) +
                    ") exceed the usable memory; add GPUs or use smaller weights (fp8, int4).");
  }
  if (in.context > in.model.max_position) {
    notes.push_back("The context " + std::to_string(in.context) + " exceeds the model's trained " +
                    std::to_string(in.model.max_position) + " positions.");
  }
  if (in.model.sliding_window > 0 && in.context > in.model.sliding_window) {
    notes.push_back("The model attends over a sliding window of " +
                    std::to_string(in.model.sliding_window) +
                    " tokens; this plan keeps the whole context in the cache, as the engine does.");
  }
}

void DtypeNotes(const PlanInputs& in, const PlanResult& r, std::vector<std::string>& notes) {
  const KVShape shape = in.kv_shape.value_or(in.model.kv_shape());
  if (IsWide(in.kv_dtype)) {
    const PlanResult fp8 = PlanWith(in, KVCacheDType::kFp8E4M3, in.gpu_memory_utilization);
    notes.push_back(
        "Try FP8 KV first (--kv-cache-dtype fp8): " +
        Fmt("%.0f instead of %.0f bytes per token (%.0f%%), ", static_cast<double>(fp8.kv_bytes_per_token),
            static_cast<double>(r.kv_bytes_per_token),
            100.0 * static_cast<double>(fp8.kv_bytes_per_token) / static_cast<double>(r.kv_bytes_per_token)) +
        "max concurrency " + std::to_string(r.max_concurrency) + " -> " +
        std::to_string(fp8.max_concurrency) + " at this context; usually no visible quality loss.");
  }
  notes.push_back(
      "4-bit KV (int4, nvfp4, kivi2) only with mixed precision (sink and recent tokens and "
      "sensitive layers kept wide), and only after measuring it on your own long-context task "
      "(retrieval, KL against a bf16 run), not on perplexity alone.");
  if (IsFourBitOrLess(in.kv_dtype)) {
    notes.push_back("You asked for " + Name(in.kv_dtype) +
                    ": validate it as above before serving.");
  }
  if (shape.mla) {
    notes.push_back(
        "MLA caches one latent of " + std::to_string(shape.head_dim_k) + " + a RoPE key of " +
        std::to_string(shape.rope_dim) +
        " per token per layer, shared by all heads. The RoPE part (k_pe) stays bf16 when the "
        "latent is quantized: it carries position, and it is small. Under tensor parallelism the "
        "latent cannot be split by heads, so each of the " + std::to_string(in.num_gpus) +
        " GPUs holds all of it: more GPUs add room, not a smaller KV per token (which is why MLA "
        "deployments use data-parallel attention, each GPU caching only its own requests).");
  } else if (in.num_gpus > 1) {
    notes.push_back("Tensor parallelism over " + std::to_string(in.num_gpus) +
                    " GPUs splits the weights and the " + std::to_string(shape.num_kv_heads) +
                    " KV heads: each GPU stores " +
                    std::to_string(ShardKVShape(shape, in.num_gpus).num_kv_heads) + " of them.");
  }
}

void PrefixAndSpeedNotes(const PlanInputs& in, const PlanResult& r, std::vector<std::string>& notes) {
  if (in.prefix_share > 0) {
    notes.push_back(
        "Enable prefix caching: " + std::to_string(r.shared_prefix_blocks * in.block_size) +
        " shared prompt tokens (" + std::to_string(r.shared_prefix_blocks) +
        " full blocks) are stored once instead of " + std::to_string(in.concurrency) +
        " times, saving " + FormatBytes(static_cast<int64_t>(r.prefix_memory_saved_bytes)) +
        " of KV, and each later request skips " +
        Fmt("%.0f%% of its prefill.", 100.0 * r.prefix_prefill_saved_fraction));
  } else {
    notes.push_back("If the prompts share a prefix (a system prompt, few-shot examples), pass "
                    "--prefix-share to see what prefix caching saves.");
  }
  const auto& d = r.decode;
  const double kv_part = d.kv_bytes_read / std::max(1.0, d.weight_bytes_read + d.kv_bytes_read);
  if (r.bottleneck == "capacity") {
    notes.push_back("Bottleneck: capacity. Lower the concurrency (max " +
                    std::to_string(r.max_concurrency) + " at this context) or the context (max " +
                    std::to_string(r.max_model_len_uncapped) + " at this concurrency), use a smaller "
                    "KV dtype, or add GPUs.");
  } else if (r.bottleneck == "memory_bandwidth") {
    notes.push_back(Fmt("Decode is memory-bound: a step reads %.2f GB per GPU (%.0f%% of it KV) in "
                        "%.2f ms; a smaller KV dtype speeds decode as well as fitting more.",
                        (d.weight_bytes_read + d.kv_bytes_read) / 1e9, 100.0 * kv_part,
                        d.memory_bound_s * 1e3));
  } else {
    notes.push_back(Fmt("Decode is compute-bound at this batch (%.2f ms of math vs %.2f ms of "
                        "memory traffic per step); fp8 weights would use the faster tensor cores.",
                        d.compute_bound_s * 1e3, d.memory_bound_s * 1e3));
  }
}

}  // namespace

Advice Advise(const PlanInputs& in, const PlanResult& r) {
  Advice a;
  // 4-bit is never recommended on its own: it needs mixed precision and a measurement on
  // the user's task first, so it only appears in the notes.
  std::vector<KVCacheDType> dtypes = {in.kv_dtype};
  if (IsWide(in.kv_dtype)) dtypes.push_back(KVCacheDType::kFp8E4M3);
  std::vector<double> utils = {in.gpu_memory_utilization};
  if (in.gpu_memory_utilization < 0.95 && in.kv_cache_memory_bytes < 0) utils.push_back(0.95);

  Recommendation& rec = a.recommended;
  rec.enable_prefix_caching = in.prefix_share > 0;
  bool found = false;
  for (KVCacheDType t : dtypes) {
    for (double u : utils) {
      if (!found && PlanWith(in, t, u).fits) {
        rec.kv_cache_dtype = t;
        rec.gpu_memory_utilization = u;
        rec.max_model_len = in.context;
        rec.fits = found = true;
      }
    }
  }
  if (!found) {
    rec.kv_cache_dtype = dtypes.back();
    rec.gpu_memory_utilization = utils.back();
    rec.max_model_len = PlanWith(in, rec.kv_cache_dtype, rec.gpu_memory_utilization).max_model_len;
  }
  rec.min_num_gpus = MinNumGpus(in, rec.kv_cache_dtype);

  CapacityNotes(in, r, a.notes);
  if (!r.fits && found) {
    a.notes.push_back("It fits with --kv-cache-dtype " + Name(rec.kv_cache_dtype) +
                      Fmt(" --gpu-memory-utilization %.2f.", rec.gpu_memory_utilization));
  } else if (!found) {
    std::string note = "With " + Name(rec.kv_cache_dtype) + " KV it does not fit on " +
                       std::to_string(in.num_gpus) + " GPU(s) either: " +
                       (rec.min_num_gpus > 0 ? std::to_string(rec.min_num_gpus) + " GPUs would do"
                                             : "no tensor-parallel degree up to 64 does") +
                       ", or lower --max-model-len to " + std::to_string(rec.max_model_len) + ".";
    if (!IsFourBitOrLess(in.kv_dtype) &&
        PlanWith(in, KVCacheDType::kInt4, utils.back()).fits) {
      note += " int4 KV would fit, with the caveats below.";
    }
    a.notes.push_back(note);
  }
  DtypeNotes(in, r, a.notes);
  PrefixAndSpeedNotes(in, r, a.notes);
  return a;
}

}  // namespace pagoda
