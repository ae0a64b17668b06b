#include "server/async_engine.h"

#include <cstdio>
#include <exception>
#include <future>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "server/metrics.h"

namespace pagoda {

namespace {
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

RequestStream::RequestStream(int64_t num_choices, Clock::time_point arrival)
    : num_choices_(num_choices),
      arrival_(arrival),
      choice_finished_(num_choices, false),
      last_token_time_(num_choices),
      has_token_(num_choices, false) {}

bool RequestStream::Wait(std::vector<ChoiceOutput>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || num_finished_ == num_choices_; });
  while (!queue_.empty()) {
    out->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return num_finished_ < num_choices_ || !out->empty();
}

std::vector<ChoiceOutput> RequestStream::WaitAll() {
  std::vector<ChoiceOutput> all;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return num_finished_ == num_choices_; });
  all.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  return all;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_finished_ == num_choices_;
}

void RequestStream::Push(ChoiceOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (choice_finished_[out.choice]) return;
    if (out.output.finished) {
      choice_finished_[out.choice] = true;
      ++num_finished_;
    }
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

void RequestStream::CloseAborted() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t c = 0; c < num_choices_; ++c) {
      if (choice_finished_[c]) continue;
      choice_finished_[c] = true;
      ++num_finished_;
      ChoiceOutput out;
      out.choice = c;
      out.output.finished = true;
      out.output.finish_reason = FinishReason::kAbort;
      queue_.push_back(std::move(out));
    }
  }
  cv_.notify_all();
}

AsyncEngine::AsyncEngine(Engine& engine, ServerMetrics* metrics, const AsyncEngineOptions& options)
    : engine_(engine),
      metrics_(metrics),
      options_(options),
      max_model_len_(engine.config().scheduler.max_model_len) {
  stats_ = engine_.Stats();
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::RunCommand(std::function<void()> fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    PAGODA_ENSURE(!stop_, ErrorCode::kResourceExhausted, "the server is shutting down");
    commands_.push_back([fn = std::move(fn), done] {
      try {
        fn();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_all();
  result.get();  // rethrows the engine thread's exception here
}

std::shared_ptr<RequestStream> AsyncEngine::Submit(std::vector<RequestSpec> specs,
                                                   std::string log_id) {
  PAGODA_ENSURE(!specs.empty(), ErrorCode::kInvalidArgument, "the prompt is empty");
  const int64_t n = specs[0].n;
  const int64_t num_prompts = static_cast<int64_t>(specs.size());
  auto stream =
      std::make_shared<RequestStream>(num_prompts * std::max<int64_t>(n, 1), Clock::now());
  stream->n_ = n;
  stream->log_id_ = std::move(log_id);
  RunCommand([&] {
    if (const std::string failure = Failure(); !failure.empty()) {
      ThrowError(ErrorCode::kInternal, "the engine failed (" + failure +
                                           "): this server cannot run requests until it is restarted");
    }
    const int64_t waiting = engine_.Stats().num_waiting;
    if (options_.max_queue > 0 && waiting + num_prompts > options_.max_queue) {
      ThrowError(ErrorCode::kResourceExhausted,
                 "the server is overloaded: " + std::to_string(waiting) +
                     " requests are waiting (--max-queue " + std::to_string(options_.max_queue) +
                     "); retry later");
    }
    std::vector<int64_t> ids;
    try {
      for (RequestSpec& spec : specs) ids.push_back(engine_.AddRequest(std::move(spec)));
    } catch (...) {
      for (int64_t id : ids) engine_.Abort(id);
      throw;
    }
    stream->engine_ids_ = ids;
    for (size_t i = 0; i < ids.size(); ++i)
      streams_[ids[i]] = Entry{stream, static_cast<int64_t>(i)};
    std::lock_guard<std::mutex> lock(mu_);
    ++num_unfinished_;
    stats_ = engine_.Stats();
  });
  return stream;
}

void AsyncEngine::Abort(const std::shared_ptr<RequestStream>& stream) {
  if (stream == nullptr || stream->finished()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;  // the loop aborts everything on its way out
    commands_.push_back([this, stream] {
      if (stream->finished() || stream->engine_ids_.empty()) return;
      PAGODA_LOG(kInfo) << stream->log_id_ << ": aborted (client gone or shutdown)";
      for (int64_t id : stream->engine_ids_) {
        engine_.Abort(id);
        streams_.erase(id);
      }
      if (metrics_ != nullptr) metrics_->CountFinished(FinishReason::kAbort);
      {
        std::lock_guard<std::mutex> l(mu_);
        --num_unfinished_;
        stats_ = engine_.Stats();
      }
      stream->CloseAborted();
    });
  }
  cv_.notify_all();
}

void AsyncEngine::AbortAll() {
  std::vector<std::shared_ptr<RequestStream>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    commands_.push_back([this] {
      std::vector<std::shared_ptr<RequestStream>> open;
      for (auto& [id, e] : streams_) {
        if (e.prompt_index == 0) open.push_back(e.stream);
      }
      for (auto& s : open) {
        PAGODA_LOG(kInfo) << s->log_id_ << ": aborted (shutdown timeout)";
        for (int64_t id : s->engine_ids_) {
          engine_.Abort(id);
          streams_.erase(id);
        }
        if (metrics_ != nullptr) metrics_->CountFinished(FinishReason::kAbort);
        {
          std::lock_guard<std::mutex> l(mu_);
          --num_unfinished_;
          stats_ = engine_.Stats();
        }
        s->CloseAborted();
      }
    });
  }
  cv_.notify_all();
}

EngineStats AsyncEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string AsyncEngine::Failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void AsyncEngine::Fail(const std::string& what) {
  PAGODA_LOG(kError) << "engine step failed: " << what << "; aborting " << streams_.size()
                     << " request(s) in flight and refusing new ones (restart the server)";
  {
    // Before the streams close: whoever sees them closed sees the failure too.
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = what;
    failed_ = true;
    num_unfinished_ = 0;
  }
  for (auto& [id, e] : streams_) {
    try {
      engine_.Abort(id);
    } catch (const std::exception&) {
      // The engine's state after a failed step is not trusted; the stream closes anyway.
    }
    e.stream->CloseAborted();
  }
  streams_.clear();
}

int64_t AsyncEngine::NumUnfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_unfinished_;
}

void AsyncEngine::Loop() {
  last_stats_time_ = Clock::now();
  while (true) {
    std::deque<std::function<void()>> commands;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1),
                   [&] { return stop_ || !commands_.empty() || (engine_.HasUnfinished() && !failed_); });
      commands.swap(commands_);
      if (stop_ && commands.empty()) break;
    }
    for (auto& c : commands) c();
    if (engine_.HasUnfinished() && !failed_) {
      const int64_t steps_before = engine_.Stats().steps;
      std::vector<RequestOutput> outs;
      try {
        outs = engine_.Step();
      } catch (const std::exception& e) {
        Fail(e.what());
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_ = engine_.Stats();
      }
      Dispatch(outs);
      if (outs.empty() && engine_.Stats().steps == steps_before) {
        // Nothing could be scheduled (should not happen); do not spin.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(10),
                     [&] { return stop_ || !commands_.empty(); });
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = engine_.Stats();
    }
    MaybeLogStats(false);
  }
  // Shutting down: whatever is left is aborted.
  for (auto& [id, e] : streams_) {
    engine_.Abort(id);
    e.stream->CloseAborted();
  }
  streams_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  num_unfinished_ = 0;
  stats_ = engine_.Stats();
}

void AsyncEngine::Dispatch(std::vector<RequestOutput>& outs) {
  const Clock::time_point now = Clock::now();
  for (RequestOutput& out : outs) {
    auto it = streams_.upper_bound(out.request_id);
    if (it == streams_.begin()) continue;
    --it;
    std::shared_ptr<RequestStream> stream = it->second.stream;
    const int64_t sample = out.request_id - it->first;
    if (sample < 0 || sample >= stream->n_) continue;  // an aborted request's leftovers
    const int64_t choice = it->second.prompt_index * stream->n_ + sample;
    if (!out.new_token_ids.empty() && metrics_ != nullptr) {
      if (!stream->has_first_token_)
        metrics_->ObserveTimeToFirstToken(Seconds(now - stream->arrival()));
      if (stream->has_token_[choice]) {
        metrics_->ObserveInterTokenLatency(Seconds(now - stream->last_token_time_[choice]));
      }
    }
    if (!out.new_token_ids.empty()) {
      stream->has_first_token_ = true;
      stream->has_token_[choice] = true;
      stream->last_token_time_[choice] = now;
    }
    const bool finished = out.finished;
    const FinishReason reason = out.finish_reason;
    if (finished) {
      ++stream->num_finished_dispatched_;
      if (metrics_ != nullptr) metrics_->CountFinished(reason);
    }
    if (finished && stream->num_finished_dispatched_ == stream->num_choices()) {
      // Bookkeeping first, so that whoever sees the stream finish sees it counted.
      if (metrics_ != nullptr) metrics_->ObserveE2eLatency(Seconds(now - stream->arrival()));
      PAGODA_LOG(kInfo) << stream->log_id_ << ": finished (" << FinishReasonName(reason)
                        << "), prompt " << out.num_prompt_tokens << " tokens ("
                        << out.num_cached_tokens << " cached), output " << out.num_output_tokens
                        << " tokens, " << Seconds(now - stream->arrival()) << " s";
      for (int64_t id : stream->engine_ids_) streams_.erase(id);
      std::lock_guard<std::mutex> lock(mu_);
      --num_unfinished_;
    }
    stream->Push(ChoiceOutput{choice, std::move(out)});
  }
}

void AsyncEngine::MaybeLogStats(bool force) {
  if (options_.stats_interval_s <= 0) return;
  const Clock::time_point now = Clock::now();
  const double dt = Seconds(now - last_stats_time_);
  if (!force && dt < options_.stats_interval_s) return;
  const EngineStats s = engine_.Stats();
  const bool busy = s.num_running + s.num_waiting > 0 ||
                    s.prompt_tokens != last_stats_prompt_tokens_ ||
                    s.generation_tokens != last_stats_generation_tokens_;
  if (busy || force) {
    char line[320];
    std::snprintf(
        line, sizeof(line),
        "stats: prompt throughput %.1f tokens/s, generation throughput %.1f tokens/s, running "
        "%lld, "
        "waiting %lld, KV cache usage %.1f%%, prefix cache hit rate %.1f%%, preemptions %lld",
        (s.prompt_tokens - last_stats_prompt_tokens_) / dt,
        (s.generation_tokens - last_stats_generation_tokens_) / dt,
        static_cast<long long>(s.num_running), static_cast<long long>(s.num_waiting),
        100.0 * s.kv_usage, 100.0 * s.prefix_cache.HitRate(),
        static_cast<long long>(s.num_preemptions));
    PAGODA_LOG(kInfo) << line;
  }
  last_stats_time_ = now;
  last_stats_prompt_tokens_ = s.prompt_tokens;
  last_stats_generation_tokens_ = s.generation_tokens;
}

}  // namespace pagoda
