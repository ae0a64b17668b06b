#include "server/metrics.h"

#include <cstdio>

namespace pagoda {

namespace {

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void Header(const char* name, const char* type, const char* help, std::string* out) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void Sample(const std::string& name, const std::string& labels, double value, std::string* out) {
  *out += name + "{" + labels + "} " + FormatDouble(value) + "\n";
}

// vLLM's buckets (vllm/v1/metrics/loggers.py).
std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> ItlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> E2eBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string* out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? FormatDouble(bounds_[i]) : "+Inf";
    *out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + FormatDouble(sum_) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(TtftBuckets()),
      itl_(ItlBuckets()),
      e2e_(E2eBuckets()) {}

void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(seconds);
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}

void ServerMetrics::ObserveE2eLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.Observe(seconds);
}

void ServerMetrics::CountFinished(FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (reason) {
    case FinishReason::kStop:
      ++finished_stop_;
      break;
    case FinishReason::kLength:
      ++finished_length_;
      break;
    case FinishReason::kAbort:
      ++finished_abort_;
      break;
    case FinishReason::kNone:
      break;
  }
}

std::string ServerMetrics::Render(const EngineStats& s) const {
  const std::string labels = "model_name=\"" + EscapeLabelValue(model_name_) + "\"";
  std::string out;
  Header("pagoda_num_requests_running", "gauge", "Number of requests in model execution batches.",
         &out);
  Sample("pagoda_num_requests_running", labels, static_cast<double>(s.num_running), &out);
  Header("pagoda_num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         &out);
  Sample("pagoda_num_requests_waiting", labels, static_cast<double>(s.num_waiting), &out);
  Header("pagoda_kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", &out);
  Sample("pagoda_kv_cache_usage_perc", labels, s.kv_usage, &out);
  Header("pagoda_prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", &out);
  Sample("pagoda_prefix_cache_queries_total", labels,
         static_cast<double>(s.prefix_cache.num_query_tokens), &out);
  Header("pagoda_prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", &out);
  Sample("pagoda_prefix_cache_hits_total", labels,
         static_cast<double>(s.prefix_cache.num_hit_tokens), &out);
  Header("pagoda_num_preemptions_total", "counter",
         "Cumulative number of preemptions from the engine.", &out);
  Sample("pagoda_num_preemptions_total", labels, static_cast<double>(s.num_preemptions), &out);
  Header("pagoda_prompt_tokens_total", "counter", "Number of prefill tokens processed.", &out);
  Sample("pagoda_prompt_tokens_total", labels, static_cast<double>(s.prompt_tokens), &out);
  Header("pagoda_generation_tokens_total", "counter", "Number of generation tokens processed.",
         &out);
  Sample("pagoda_generation_tokens_total", labels, static_cast<double>(s.generation_tokens), &out);

  std::lock_guard<std::mutex> lock(mu_);
  Header("pagoda_request_success_total", "counter",
         "Count of finished requests (per choice), by finish reason.", &out);
  Sample("pagoda_request_success_total", labels + ",finished_reason=\"stop\"",
         static_cast<double>(finished_stop_), &out);
  Sample("pagoda_request_success_total", labels + ",finished_reason=\"length\"",
         static_cast<double>(finished_length_), &out);
  Sample("pagoda_request_success_total", labels + ",finished_reason=\"abort\"",
         static_cast<double>(finished_abort_), &out);
  Header("pagoda_time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.", &out);
  ttft_.Render("pagoda_time_to_first_token_seconds", labels, &out);
  Header("pagoda_inter_token_latency_seconds", "histogram",
         "Histogram of inter-token latency in seconds.", &out);
  itl_.Render("pagoda_inter_token_latency_seconds", labels, &out);
  Header("pagoda_e2e_request_latency_seconds", "histogram",
         "Histogram of end to end request latency in seconds.", &out);
  e2e_.Render("pagoda_e2e_request_latency_seconds", labels, &out);
  return out;
}

}  // namespace pagoda
