// ServerMetrics: the Prometheus text exposition of /metrics, with vLLM's metric names
// under the prefix `pagoda_` (vLLM's `vllm:` fails promtool's lint) and a `model_name`
// label on every sample, as vLLM does.
//
// Gauges and counters that the engine already keeps (KV usage, running/waiting,
// preemptions, prompt/generation tokens, prefix-cache queries/hits) are read from an
// EngineStats snapshot at render time; the latency histograms are observed here by
// the engine thread as outputs arrive.
//
// Thread safety: Observe*/Count*/Render may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"

namespace pagoda {

// A Prometheus histogram: cumulative buckets at fixed upper bounds, plus sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // REQUIRES: increasing
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines of `name` with `labels` (e.g. model_name="x").
  void Render(const std::string& name, const std::string& labels, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveE2eLatency(double seconds);
  void CountFinished(FinishReason reason);  // per choice

  // The whole exposition (HELP and TYPE lines, then samples), ending in a newline.
  std::string Render(const EngineStats& stats) const;

 private:
  const std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  int64_t finished_stop_ = 0;
  int64_t finished_length_ = 0;
  int64_t finished_abort_ = 0;
};

// Escapes a label value for the text format (backslash, double quote, newline).
std::string EscapeLabelValue(const std::string& value);

}  // namespace pagoda
