// Helpers for golden and end-to-end tests: where the fixtures are, and running a
// whole sequence through a model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"

#include "io/safetensors_file.h"
#include "model/model.h"

namespace pagoda::testing {

// $PAGODA_FIXTURES, or ../shared/fixtures beside the repository root.
std::string FixturesDir();
// FixturesDir() + "/" + relative; fails the test (never skips) when the file is missing.
std::string Fixture(const std::string& relative);

// Runs `ids` through the model in chunks of `chunk` tokens with a fresh cache and
// returns the logits of every position [ids.size(), vocab].
std::vector<float> AllLogits(Model& model, const std::vector<int32_t>& ids, DType kv_dtype = DType::kF32,
                             int64_t block_size = 16, int64_t chunk = 1 << 30,
                             const ForwardObserver* observer = nullptr, KVCache* cache_out = nullptr);

// ---- comparisons with fixtures/models/hf/*/golden.safetensors -------------------------
// (what the golden tensors hold: ../shared/README.md)

// input_ids.s as int32.
std::vector<int32_t> GoldenIds(const SafetensorsFile& golden, const std::string& s);

struct LogitErrors {
  double topk = 0.0;  // worst |ours - golden| over the 8 golden largest logits, every position
  double last = 0.0;  // worst over the full last-position logits
  int64_t outliers = 0;  // positions excused from tol (max_outlier_positions)
};

// Checks logits [n, vocab] of sequence s against topk_ids.s/topk_logits.s (the 8 largest at
// every position; no other token may rise above the 8th by more than tol) and against
// logits_last.s, each within tol (absolute). Returns the worst errors measured.
// max_outlier_positions: up to that many positions before the last may miss tol (counted in
// `outliers`, left out of `topk`). Only for bf16 MoE runs, where a rounding can flip a near tie
// between experts at a position and change its logits wholesale.
LogitErrors CheckGoldenLogits(const std::vector<float>& logits, int64_t vocab,
                              const SafetensorsFile& golden, const std::string& s, double tol,
                              int64_t max_outlier_positions = 0);

// Greedy tokens equal the golden's up to the first step whose golden top-2 margin is under
// min_margin (from there a different but legitimate token may follow).
void CheckGoldenGreedy(Model& model, const SafetensorsFile& golden, const std::string& s, double min_margin = 1e-3);

// AllLogits (f32 KV cache) + CheckGoldenLogits (+ CheckGoldenGreedy when check_greedy).
LogitErrors CheckSequence(Model& model, const SafetensorsFile& golden, const std::string& s,
                          double tol, bool check_greedy, int64_t max_outlier_positions = 0);

// Greedy decoding of `steps` tokens after `prompt` (prefill, then one token per forward) on a
// fresh `cache` of any format, through a scrambled block table. REQUIRES: the cache holds
// prompt.size() + steps tokens.
std::vector<int32_t> GreedyWithCache(Model& model, KVCache& cache, const std::vector<int32_t>& prompt,
                                     int64_t steps);

// An engine configuration for tests: num_blocks blocks of block_size tokens in kv_dtype, a
// step budget, max_model_len 256 and 64 sequences at most.
EngineConfig SmallEngineConfig(int64_t num_blocks, int64_t block_size, bool prefix_caching, int64_t budget,
                               KVCacheDType kv_dtype);

// Adds every spec to `engine` and steps it until nothing is unfinished; the generated ids (and,
// when texts is given, the text) by request id.
std::map<int64_t, std::vector<int32_t>> RunEngine(Engine& engine, const std::vector<RequestSpec>& specs,
                                                  std::map<int64_t, std::string>* texts = nullptr);

// The greedy tokens of `prompt` run alone through a Generator (EOS ignored).
std::vector<int32_t> GreedyAlone(Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens, DType kv_dtype,
                                 int64_t max_model_len);

}  // namespace pagoda::testing
