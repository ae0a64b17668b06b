// Scheduler: continuous batching under a token budget (vLLM V1's scheduler).
//
// Each step it walks the RUNNING requests first (oldest first): each gets the tokens it
// still needs (1 for a decode, the next chunk for a prefill), within the step's budget.
// When the KV cache cannot take them, the NEWEST running request is preempted: its blocks
// go back to the pool and it returns to the front of the waiting queue, to be recomputed.
// Then, if nothing was preempted, WAITING requests are admitted in arrival order while
// there is budget, a free seat (max_num_seqs) and blocks, each reusing its longest cached
// prefix (except requests that want prompt logits: every prompt position of theirs is
// computed, so their logprobs are the model's, never skipped by a cache hit). Long
// prompts are prefilled in chunks of at most the remaining budget.
//
// Not thread-safe: the engine's step loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // --max-num-seqs
  int64_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens: the step's token budget
  int64_t max_model_len = 2048;
};

struct ScheduledRequest {
  Request* request = nullptr;
  int64_t num_tokens = 0;  // tokens computed this step, from request->num_computed_tokens
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // running order
  std::vector<BlockCopy> copies;            // copy-on-write copies before the forward
  std::vector<Request*> preempted;
  int64_t num_scheduled_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  const SchedulerConfig& config() const { return config_; }
  // Queues a new request (status kWaiting). The scheduler does not own it.
  void AddWaiting(Request* request);
  // Removes a request from either queue and frees its blocks (finish or abort).
  void Remove(Request* request);
  // Adds an already running request (a fork child that shares its parent's blocks).
  void AddRunning(Request* request);

  SchedulerOutput Schedule();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

 private:
  KVRequest KvView(const Request& r) const;
  void ScheduleRunning(SchedulerOutput* out, int64_t* budget);
  void ScheduleWaiting(SchedulerOutput* out, int64_t* budget);
  void Preempt(Request* r, SchedulerOutput* out);

  SchedulerConfig config_;
  KVCacheManager& kv_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  int64_t num_preemptions_ = 0;
};

}  // namespace pagoda
