// pagoda bench serve: an online-serving benchmark client against a running server
// (pagoda serve, or any OpenAI-compatible one), with vLLM's `vllm bench serve` flags,
// dataset ("random"), metrics and result table.
//
// Each prompt is --random-prefix-len shared token ids then --random-input-len random
// ones, sent as token ids with ignore_eos and max_tokens = --random-output-len, so
// every request produces exactly that many tokens. Requests stream (SSE); TTFT is the
// first content chunk, ITL the gaps between chunks, TPOT (e2el - ttft) / (out - 1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "server/httplib_config.h"

namespace pagoda::cli {
namespace {

using BenchClock = std::chrono::steady_clock;

struct BenchServeFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;
  std::string endpoint = "/v1/completions";
  std::string dataset_name = "random";
  int64_t num_prompts = 1000;
  int64_t random_input_len = 1024;
  int64_t random_output_len = 128;
  int64_t random_prefix_len = 0;
  std::optional<int64_t> max_concurrency;
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 0;
  std::optional<int64_t> vocab_size;
  bool json = false;
  bool disable_tqdm = false;
};

struct RequestResult {
  bool success = false;
  std::string error;
  int64_t prompt_len = 0;
  int64_t output_tokens = 0;
  double ttft = 0.0;  // seconds
  double latency = 0.0;
  std::vector<double> itl;
};

std::string ApiKeyHeader() {
  const char* key = std::getenv("OPENAI_API_KEY");
  return key != nullptr && *key != '\0' ? std::string("Bearer ") + key : std::string();
}

// Streams one completion and measures it.
RequestResult SendOne(const BenchServeFlags& f, const std::string& model,
                      const std::vector<int32_t>& prompt) {
  RequestResult r;
  r.prompt_len = static_cast<int64_t>(prompt.size());
  nlohmann::json body = {{"model", model},
                         {"prompt", prompt},
                         {"max_tokens", f.random_output_len},
                         {"temperature", 0.0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  httplib::Client cli(f.host, f.port);
  cli.set_read_timeout(std::chrono::hours(1));
  cli.set_tcp_nodelay(true);
  httplib::Request req;
  req.method = "POST";
  req.path = f.endpoint;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  const std::string auth = ApiKeyHeader();
  if (!auth.empty()) req.set_header("Authorization", auth);

  std::string buffer, error_body;
  int64_t chunks = 0;
  bool got_done = false;
  const auto start = BenchClock::now();
  auto last = start;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t pos;
    while ((pos = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, pos);
      buffer.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) {
        error_body += event;
        continue;
      }
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        got_done = true;
        continue;
      }
      const nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) {
        r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const auto now = BenchClock::now();
        if (chunks == 0) {
          r.ttft = std::chrono::duration<double>(now - start).count();
        } else {
          r.itl.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
        ++chunks;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  r.latency = std::chrono::duration<double>(BenchClock::now() - start).count();
  if (!ok) {
    r.error = "connection error: " + httplib::to_string(err);
  } else if (res.status != 200) {
    r.error = "HTTP " + std::to_string(res.status) + ": " + buffer + error_body;
  } else if (!got_done || chunks == 0) {
    r.error = "the stream ended early";
  } else {
    if (r.output_tokens == 0) r.output_tokens = chunks;
    r.success = true;
  }
  return r;
}

// numpy's percentile (linear interpolation); 0 for no data.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double Stdev(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

void ProgressBar(int64_t done, int64_t total) {
  const int width = 40;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

// GET /v1/models: the served name and (pagoda's extension) the vocabulary size.
void QueryModel(const BenchServeFlags& f, std::string* model, int64_t* vocab) {
  httplib::Client cli(f.host, f.port);
  httplib::Headers headers;
  const std::string auth = ApiKeyHeader();
  if (!auth.empty()) headers.emplace("Authorization", auth);
  auto res = cli.Get("/v1/models", headers);
  PAGODA_ENSURE(res && res->status == 200, ErrorCode::kNotFound,
                "no server at http://" << f.host << ":" << f.port << " (GET /v1/models failed)");
  const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  PAGODA_ENSURE(
      !j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty(),
      ErrorCode::kInvalidArgument, "GET /v1/models: unexpected answer " << res->body);
  if (model->empty()) *model = j["data"][0].value("id", "");
  if (*vocab <= 0) *vocab = j["data"][0].value("vocab_size", int64_t{0});
}

int RunBenchServe(const BenchServeFlags& f) {
  PAGODA_ENSURE(f.dataset_name == "random", ErrorCode::kInvalidArgument,
                "--dataset-name " << f.dataset_name << ": only 'random' is supported");
  PAGODA_ENSURE(f.num_prompts >= 1 && f.random_input_len >= 0 && f.random_output_len >= 1 &&
                    f.random_prefix_len >= 0 && f.random_prefix_len + f.random_input_len >= 1,
                ErrorCode::kInvalidArgument, "bad --num-prompts / --random-*-len values");
  PAGODA_ENSURE(!f.max_concurrency || *f.max_concurrency >= 1, ErrorCode::kInvalidArgument,
                "--max-concurrency must be >= 1");
  PAGODA_ENSURE(f.request_rate > 0, ErrorCode::kInvalidArgument, "--request-rate must be > 0");
  std::string model = f.model;
  int64_t vocab = f.vocab_size.value_or(0);
  QueryModel(f, &model, &vocab);
  PAGODA_ENSURE(vocab > 3, ErrorCode::kInvalidArgument,
                "the server does not report its vocabulary size: give --vocab-size");

  // The dataset: token ids drawn from [3, vocab) (0-2 are usually unk/bos/eos).
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<int32_t> token(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prefix(f.random_prefix_len);
  for (auto& t : prefix) t = token(rng);
  std::vector<std::vector<int32_t>> prompts(f.num_prompts);
  for (auto& p : prompts) {
    p = prefix;
    for (int64_t i = 0; i < f.random_input_len; ++i) p.push_back(token(rng));
  }
  PAGODA_LOG(kInfo) << "bench serve: " << f.num_prompts << " prompts of " << f.random_prefix_len
                    << "+" << f.random_input_len << " tokens, " << f.random_output_len
                    << " output tokens each, model " << model << ", request rate " << f.request_rate
                    << ", max concurrency "
                    << (f.max_concurrency ? std::to_string(*f.max_concurrency) : "none");

  std::vector<RequestResult> results(f.num_prompts);
  std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0, done = 0;
  std::vector<std::thread> threads;
  std::exponential_distribution<double> gap(std::isinf(f.request_rate) ? 1.0 : f.request_rate);
  const auto start = BenchClock::now();
  double next_arrival = 0.0;
  for (int64_t i = 0; i < f.num_prompts; ++i) {
    if (!std::isinf(f.request_rate)) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<BenchClock::duration>(
                                                std::chrono::duration<double>(next_arrival)));
      next_arrival += gap(rng);
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      if (f.max_concurrency) cv.wait(lock, [&] { return in_flight < *f.max_concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      results[i] = SendOne(f, model, prompts[i]);
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      ++done;
      if (!f.disable_tqdm) ProgressBar(done, f.num_prompts);
      cv.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  const double duration = std::chrono::duration<double>(BenchClock::now() - start).count();

  int64_t completed = 0, failed = 0, input_tokens = 0, output_tokens = 0;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++failed;
      if (failed <= 3) {
        PAGODA_LOG(kWarning) << "request failed: " << r.error;
      }
      continue;
    }
    ++completed;
    input_tokens += r.prompt_len;
    output_tokens += r.output_tokens;
    ttfts.push_back(r.ttft * 1e3);
    e2els.push_back(r.latency * 1e3);
    if (r.output_tokens > 1)
      tpots.push_back((r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1) * 1e3);
    for (double x : r.itl) itls.push_back(x * 1e3);
  }

  nlohmann::ordered_json out;
  out["duration"] = duration;
  out["completed"] = completed;
  out["failed"] = failed;
  out["total_input_tokens"] = input_tokens;
  out["total_output_tokens"] = output_tokens;
  out["request_throughput"] = completed / duration;
  out["output_throughput"] = output_tokens / duration;
  out["total_token_throughput"] = (input_tokens + output_tokens) / duration;
  out["max_concurrency"] = f.max_concurrency ? nlohmann::ordered_json(*f.max_concurrency) : nullptr;
  out["request_rate"] = std::isinf(f.request_rate) ? nlohmann::ordered_json("inf")
                                                   : nlohmann::ordered_json(f.request_rate);
  const std::pair<const char*, const std::vector<double>*> series[] = {
      {"ttft", &ttfts}, {"tpot", &tpots}, {"itl", &itls}, {"e2el", &e2els}};
  for (const auto& [name, v] : series) {
    const std::string n = name;
    out["mean_" + n + "_ms"] = Mean(*v);
    out["median_" + n + "_ms"] = Percentile(*v, 50);
    out["std_" + n + "_ms"] = Stdev(*v);
    out["p99_" + n + "_ms"] = Percentile(*v, 99);
  }
  if (f.json) {
    std::cout << out.dump() << std::endl;
    return completed > 0 ? 0 : 1;
  }

  auto row = [](const std::string& k, const std::string& v) {
    std::printf("%-40s %-10s\n", k.c_str(), v.c_str());
  };
  auto num = [](double v) {
    char b[64];
    std::snprintf(b, sizeof(b), "%.2f", v);
    return std::string(b);
  };
  auto title = [](const std::string& t) {
    const int width = 50, pad = width - static_cast<int>(t.size());
    std::printf("%s%s%s\n", std::string(pad / 2, '-').c_str(), t.c_str(),
                std::string(pad - pad / 2, '-').c_str());
  };
  std::printf("============ Serving Benchmark Result ============\n");
  row("Successful requests:", std::to_string(completed));
  if (failed > 0) row("Failed requests:", std::to_string(failed));
  if (f.max_concurrency) row("Maximum request concurrency:", std::to_string(*f.max_concurrency));
  row("Benchmark duration (s):", num(duration));
  row("Total input tokens:", std::to_string(input_tokens));
  row("Total generated tokens:", std::to_string(output_tokens));
  row("Request throughput (req/s):", num(completed / duration));
  row("Output token throughput (tok/s):", num(output_tokens / duration));
  row("Total Token throughput (tok/s):", num((input_tokens + output_tokens) / duration));
  const char* titles[] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                          "Inter-token Latency", "End-to-end Latency"};
  const char* labels[] = {"TTFT", "TPOT", "ITL", "E2EL"};
  for (int s = 0; s < 4; ++s) {
    title(titles[s]);
    const std::string n = series[s].first;
    row(std::string("Mean ") + labels[s] + " (ms):", num(out["mean_" + n + "_ms"].get<double>()));
    row(std::string("Median ") + labels[s] + " (ms):",
        num(out["median_" + n + "_ms"].get<double>()));
    row(std::string("P99 ") + labels[s] + " (ms):", num(out["p99_" + n + "_ms"].get<double>()));
  }
  std::printf("==================================================\n");
  return completed > 0 ? 0 : 1;
}

}  // namespace

void AddBenchServeCommand(CLI::App* bench, Action* action) {
  auto flags = std::make_shared<BenchServeFlags>();
  CLI::App* app =
      bench->add_subcommand("serve", "online-serving benchmark against a running server (vLLM's)");
  app->add_option("--host", flags->host, "server address")->capture_default_str();
  app->add_option("--port", flags->port, "server port")->capture_default_str();
  app->add_option("--model", flags->model, "model name to send (default: the server's first)");
  app->add_option("--endpoint", flags->endpoint, "completions endpoint")->capture_default_str();
  app->add_option("--dataset-name", flags->dataset_name, "random")->capture_default_str();
  app->add_option("--num-prompts", flags->num_prompts, "number of requests")->capture_default_str();
  app->add_option("--random-input-len", flags->random_input_len, "random tokens per prompt")
      ->capture_default_str();
  app->add_option("--random-output-len", flags->random_output_len, "tokens to generate per request")
      ->capture_default_str();
  app->add_option("--random-prefix-len", flags->random_prefix_len,
                  "shared prefix tokens before the random ones")
      ->capture_default_str();
  auto* mc = app->add_option("--max-concurrency", flags->max_concurrency,
                             "most requests in flight at once");
  app->add_option("--request-rate", flags->request_rate,
                  "requests per second, Poisson arrivals (default: inf)");
  (void)mc;
  app->add_option("--seed", flags->seed, "dataset and arrival seed")->capture_default_str();
  app->add_option("--vocab-size", flags->vocab_size,
                  "token-id range (default: asked from /v1/models)");
  app->add_flag("--json", flags->json, "print one JSON object on stdout");
  app->add_flag("--disable-tqdm", flags->disable_tqdm, "no progress bar");
  app->callback([flags, action] { *action = [flags] { return RunBenchServe(*flags); }; });
}

}  // namespace pagoda::cli
