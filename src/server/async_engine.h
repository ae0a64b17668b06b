// AsyncEngine: the thread that owns the (single-threaded) Engine, so that many HTTP
// handler threads can submit requests, stream their outputs and abort them.
//
//   handler threads                         engine thread
//   Submit(specs) --command queue-------->  Engine::AddRequest (validates) --+
//        <-- the result (stream or error) --------------------------------+  |
//   stream->Wait() <--- outputs pushed --- Engine::Step() while there is work |
//   Abort(stream) ---command queue------->  Engine::Abort, the stream closes  |
//
// The engine thread steps while the engine has unfinished requests and otherwise
// sleeps on a condition variable. Validation errors come back to the submitter
// synchronously as pagoda::Error (kInvalidArgument: a 400; kResourceExhausted: the
// waiting queue is full, a 503); a bad request never reaches the engine, so it never
// harms the others.
//
// A step that throws (a device error, a bug) does not end the process: the engine thread
// logs it, aborts every request in flight (their streams finish with kAbort) and marks the
// engine failed; from then on Submit throws kInternal with the reason and Failure() returns
// it (the server's /health answers 503), until the server is restarted.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"

namespace pagoda {

class ServerMetrics;

// One output of one choice: a request with several prompts and n samples has
// num_prompts * n choices, numbered prompt-major (choice = prompt * n + sample).
struct ChoiceOutput {
  int64_t choice = 0;
  RequestOutput output;
};

// The outputs of one submitted request (all its prompts and samples), in order.
// Produced by the engine thread, consumed by one handler thread.
class RequestStream {
 public:
  RequestStream(int64_t num_choices, Clock::time_point arrival);

  // Waits up to `timeout` for outputs and moves every queued one to *out (appending).
  // Returns false once the stream is finished and everything was taken.
  bool Wait(std::vector<ChoiceOutput>* out, std::chrono::milliseconds timeout);
  // Waits until finished, returning all outputs.
  std::vector<ChoiceOutput> WaitAll();

  int64_t num_choices() const { return num_choices_; }
  Clock::time_point arrival() const { return arrival_; }
  bool finished() const;

 private:
  friend class AsyncEngine;
  void Push(ChoiceOutput out);  // counts finished choices; closes after the last
  void CloseAborted();          // finishes every open choice with kAbort

  const int64_t num_choices_;
  const Clock::time_point arrival_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceOutput> queue_;
  std::vector<bool> choice_finished_;
  int64_t num_finished_ = 0;
  // Engine-thread bookkeeping (only the engine thread touches these).
  std::vector<int64_t> engine_ids_;  // per prompt: the engine id of its first sample
  int64_t n_ = 1;
  bool has_first_token_ = false;
  std::vector<Clock::time_point> last_token_time_;  // per choice
  std::vector<bool> has_token_;                     // per choice
  int64_t num_finished_dispatched_ = 0;
  std::string log_id_;
};

struct AsyncEngineOptions {
  int64_t max_queue = 1024;       // waiting requests beyond this: Submit throws kResourceExhausted
  double stats_interval_s = 5.0;  // the periodic stats line (0: never)
};

class AsyncEngine {
 public:
  // Starts the engine thread. `engine` and `metrics` (may be null) must outlive this.
  AsyncEngine(Engine& engine, ServerMetrics* metrics, const AsyncEngineOptions& options);
  ~AsyncEngine();  // aborts what is left and joins the thread

  // Queues one request (one RequestSpec per prompt, all with the same n) and returns
  // its stream. `log_id` names it in log lines. Throws pagoda::Error on a bad spec
  // (nothing is queued then) or kResourceExhausted when the waiting queue is full.
  std::shared_ptr<RequestStream> Submit(std::vector<RequestSpec> specs, std::string log_id);
  // Aborts a request (its blocks are freed); its stream finishes with kAbort.
  // Harmless on a finished stream.
  void Abort(const std::shared_ptr<RequestStream>& stream);
  void AbortAll();

  // A snapshot taken after the latest step.
  EngineStats Stats() const;
  // Requests submitted and not finished.
  int64_t NumUnfinished() const;
  // Empty while the engine works; after a step threw, what it threw.
  std::string Failure() const;
  int64_t max_model_len() const { return max_model_len_; }

 private:
  struct Entry {
    std::shared_ptr<RequestStream> stream;
    int64_t prompt_index = 0;
  };
  void Loop();
  void RunCommand(std::function<void()> fn);  // runs fn on the engine thread, waits
  void Dispatch(std::vector<RequestOutput>& outs);
  void MaybeLogStats(bool force);
  void Fail(const std::string& what);  // engine thread: abort everything, refuse the rest

  Engine& engine_;
  ServerMetrics* metrics_;
  const AsyncEngineOptions options_;
  const int64_t max_model_len_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> commands_;
  bool stop_ = false;
  EngineStats stats_;
  int64_t num_unfinished_ = 0;
  std::string failure_;  // a step threw: every later Submit is refused
  std::atomic<bool> failed_{false};  // !failure_.empty(), read by the loop without the lock

  // Engine thread only.
  std::map<int64_t, Entry> streams_;  // engine id of a prompt's first sample -> its stream
  Clock::time_point last_stats_time_;
  int64_t last_stats_prompt_tokens_ = 0;
  int64_t last_stats_generation_tokens_ = 0;

  std::thread thread_;
};

}  // namespace pagoda
