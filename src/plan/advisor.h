// The deployment advisor: turns a plan into the settings to start the engine with and
// into advice in words (FP8 KV first; 4-bit only with mixed precision and measured on
// the user's own long-context task; MLA's RoPE part kept wide; prefix caching when
// prompts share a prefix).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/planner.h"

namespace pagoda {

struct Recommendation {
  double gpu_memory_utilization = 0.9;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = false;
  KVCacheDType kv_cache_dtype = KVCacheDType::kBF16;
  bool fits = false;          // whether the recommended settings serve the request
  int64_t min_num_gpus = 0;   // fewest GPUs (TP degree) that fit with kv_cache_dtype; 0: > 64
};

struct Advice {
  Recommendation recommended;
  std::vector<std::string> notes;  // sentences, most important first
};

// Searches, in order, the requested KV dtype then fp8_e4m3 (when the requested one is
// wider), at the requested gpu_memory_utilization then 0.95, and takes the first that
// fits. When none fits, recommends the last tried (fp8) with the longest max_model_len
// that fits at the requested concurrency, and min_num_gpus says how many GPUs would fit
// the whole request. 4-bit KV is never the recommendation (it must be measured on the
// user's task first); the notes say when it would fit.
Advice Advise(const PlanInputs& in, const PlanResult& plan);

}  // namespace pagoda
