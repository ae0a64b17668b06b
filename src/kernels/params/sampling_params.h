// Per-request sampling settings (OpenAI/vLLM names and meanings) and the logprobs a sampler
// reports: the contract of the sampler's device part (Backend::Sample; kernels/cpu/sampler.h).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace pagoda {

struct SamplingParams {
  double temperature = 1.0;         // 0 (or < 1e-5): greedy
  int64_t top_k = 0;                // <= 0: off
  double top_p = 1.0;               // (0, 1]
  double min_p = 0.0;               // [0, 1]
  double repetition_penalty = 1.0;  // > 0; 1: off (applies to prompt and output tokens)
  double presence_penalty = 0.0;    // output tokens only
  double frequency_penalty = 0.0;   // output tokens only
  std::optional<uint64_t> seed;     // absent: a random seed
  int64_t logprobs = -1;            // < 0: none; k >= 0: the chosen token's logprob + top k

  bool greedy() const { return temperature < 1e-5; }
  // Throws InvalidArgument naming the field when a value is out of range.
  void Validate() const;
};

// Log-probabilities of one position: the chosen (or given) token's and the top k, of the raw
// model output (before penalties, temperature and filters), as vLLM reports them.
struct TokenLogprobs {
  int32_t token = -1;
  double logprob = 0.0;
  int64_t rank = 0;  // 1 + the number of tokens with a larger logit (ComputeLogprobs)
  std::vector<std::pair<int32_t, double>> top;  // most likely first, ties by lower id
};

}  // namespace pagoda
