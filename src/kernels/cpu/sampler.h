// Sampler: turns one row of logits into a token, applying penalties, temperature and
// the top-k / top-p / min-p filters in vLLM's order, and reports log-probabilities of
// the raw model output (before any of that processing), as vLLM does by default.
//
// Deterministic: the same logits, history, params and RNG state give the same token.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kernels/params/sampling_params.h"

namespace pagoda {

class Sampler {
 public:
  // The RNG is seeded from params.seed, or randomly when absent.
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab] (modified in place). prompt/output: the request's tokens so far.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> output, TokenLogprobs* logprobs = nullptr);

  // The next draw in [0, 1) from the request's generator (53 random bits), the one a
  // non-greedy Sample takes: a backend that samples elsewhere (the GPU) takes its draw here,
  // once per non-greedy sample, so the request's stream of draws stays the CPU's.
  double NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Index of the largest value; the lowest index among ties.
int32_t ArgMax(std::span<const float> logits);
// The ids of `logits` ordered by value, largest first, ties by lower id (-0.0 equal to +0.0, a
// NaN as -inf: the device sampler's order), as a comparison sort with that order gives them; by
// an LSD radix sort of (value, id) keys, ~10x faster than std::sort on a 128K vocabulary.
void OrderByLogit(std::span<const float> logits, std::vector<int32_t>* ids);
// log_softmax of `logits` for the chosen token and the top k, computed in double.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k);

}  // namespace pagoda
