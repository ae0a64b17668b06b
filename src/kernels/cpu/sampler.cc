#include "kernels/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace pagoda {

void SamplingParams::Validate() const {
  auto fail = [](const char* field, const char* rule, double v) {
    ThrowInvalidArgument(std::string(field) + " must be " + rule + " (got " + std::to_string(v) + ")");
  };
  if (!(temperature >= 0.0) || !std::isfinite(temperature)) fail("temperature", ">= 0", temperature);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p", "in (0, 1]", top_p);
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p", "in [0, 1]", min_p);
  if (!(repetition_penalty > 0.0) || !std::isfinite(repetition_penalty)) {
    fail("repetition_penalty", "> 0", repetition_penalty);
  }
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0)) fail("presence_penalty", "in [-2, 2]", presence_penalty);
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0)) fail("frequency_penalty", "in [-2, 2]", frequency_penalty);
  if (logprobs > 20) fail("logprobs", "at most 20", static_cast<double>(logprobs));
}

int32_t ArgMax(std::span<const float> logits) {
  // The first index holding the largest value (what "replace on strictly greater" finds), in
  // two passes: the largest value (no dependence on an index, so the compiler vectorizes it),
  // then the first index equal to it. A NaN is never greater; a row starting with NaN gives 0.
  const size_t n = logits.size();
  if (n == 0 || std::isnan(logits[0])) return 0;
  float best = logits[0];
  for (size_t i = 1; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  size_t i = 0;
  while (!(logits[i] == best)) ++i;
  return static_cast<int32_t>(i);
}

void OrderByLogit(std::span<const float> logits, std::vector<int32_t>* ids) {
  const size_t n = logits.size();
  // Key: the value's bits mapped so that unsigned order is descending value order, then the id:
  // ascending keys are (value descending, id ascending).
  std::vector<uint64_t> keys(n), other(n);
  for (size_t i = 0; i < n; ++i) {
    float x = logits[i];
    if (x == 0.0f) x = 0.0f;                  // -0.0 as +0.0
    if (std::isnan(x)) x = -INFINITY;         // NaN as -inf
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
    keys[i] = static_cast<uint64_t>(~ascending) << 32 | static_cast<uint32_t>(i);
  }
  // Least significant byte first; a byte that is the same in every key is skipped.
  for (int shift = 0; shift < 64; shift += 8) {
    size_t count[256] = {};
    for (uint64_t k : keys) ++count[(k >> shift) & 255];
    if (n == 0 || count[(keys[0] >> shift) & 255] == n) continue;
    size_t at = 0;
    for (size_t& c : count) {
      const size_t next = at + c;
      c = at;
      at = next;
    }
    for (uint64_t k : keys) other[count[(k >> shift) & 255]++] = k;
    keys.swap(other);
  }
  ids->resize(n);
  for (size_t i = 0; i < n; ++i) (*ids)[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k) {
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<double>(logits[token]) - lse;
  out.rank = 1;
  for (float x : logits) out.rank += x > logits[token];
  if (k > 0) {
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t kk = std::min<int64_t>(k, static_cast<int64_t>(idx.size()));
    std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int64_t i = 0; i < kk; ++i) out.top.emplace_back(idx[i], static_cast<double>(logits[idx[i]]) - lse);
  }
  return out;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, TokenLogprobs* logprobs) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<float> raw;
  if (logprobs != nullptr) raw.assign(logits.begin(), logits.end());

  // Penalties (vLLM order: repetition, then frequency and presence on output tokens).
  if (params_.repetition_penalty != 1.0) {
    auto penalize = [&](int32_t id) {
      if (id < 0 || id >= vocab) return;
      float& x = logits[id];
      x = x > 0 ? static_cast<float>(x / params_.repetition_penalty)
                : static_cast<float>(x * params_.repetition_penalty);
    };
    std::vector<bool> seen(vocab, false);
    for (auto span : {prompt, output}) {
      for (int32_t id : span) {
        if (id >= 0 && id < vocab && !seen[id]) {
          seen[id] = true;
          penalize(id);
        }
      }
    }
  }
  if (params_.frequency_penalty != 0.0 || params_.presence_penalty != 0.0) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : output) ++counts[id];
    for (const auto& [id, c] : counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= static_cast<float>(params_.frequency_penalty * c + params_.presence_penalty);
    }
  }

  int32_t token;
  if (params_.greedy()) {
    token = ArgMax(logits);
  } else {
    // Candidates sorted by logit (descending, ties by id): top-k, then top-p, then min-p.
    std::vector<int32_t> idx;
    OrderByLogit(logits, &idx);
    int64_t n = vocab;
    if (params_.top_k > 0) n = std::min(n, params_.top_k);
    const double inv_t = 1.0 / params_.temperature;
    const double m = static_cast<double>(logits[idx[0]]) * inv_t;
    std::vector<double> p(n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (p[i] = std::exp(static_cast<double>(logits[idx[i]]) * inv_t - m));
    if (params_.top_p < 1.0) {
      double cum = 0.0;
      int64_t keep = n;
      for (int64_t i = 0; i < n; ++i) {
        cum += p[i] / sum;
        if (cum >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      n = keep;
    }
    if (params_.min_p > 0.0) {
      const double threshold = params_.min_p * p[0];
      int64_t keep = 1;
      while (keep < n && p[keep] >= threshold) ++keep;
      n = keep;
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += p[i];
    const double u = NextUniform() * total;
    double cum = 0.0;
    token = idx[n - 1];
    for (int64_t i = 0; i < n; ++i) {
      cum += p[i];
      if (u < cum) {
        token = idx[i];
        break;
      }
    }
  }
  if (logprobs != nullptr) *logprobs = ComputeLogprobs(raw, token, std::max<int64_t>(0, params_.logprobs));
  return token;
}

}  // namespace pagoda
