#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv) : config_(config), kv_(kv) {
  PAGODA_ENSURE(config.max_num_seqs >= 1, ErrorCode::kInvalidArgument,
                "--max-num-seqs must be at least 1 (got " << config.max_num_seqs << ")");
  PAGODA_ENSURE(config.max_num_batched_tokens >= 1, ErrorCode::kInvalidArgument,
                "--max-num-batched-tokens must be at least 1 (got " << config.max_num_batched_tokens << ")");
}

void Scheduler::AddWaiting(Request* r) {
  r->status = RequestStatus::kWaiting;
  waiting_.push_back(r);
}

void Scheduler::AddRunning(Request* r) {
  r->status = RequestStatus::kRunning;
  running_.push_back(r);
}

void Scheduler::Remove(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  kv_.Free(r->id);
}

KVRequest Scheduler::KvView(const Request& r) const {
  return KVRequest{r.id, r.tokens, r.num_computed_tokens, r.spec.cache_salt};
}

void Scheduler::Preempt(Request* r, SchedulerOutput* out) {
  kv_.Free(r->id);
  r->num_computed_tokens = 0;
  r->status = RequestStatus::kWaiting;
  ++r->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.push_front(r);
  out->preempted.push_back(r);
}

void Scheduler::ScheduleRunning(SchedulerOutput* out, int64_t* budget) {
  for (size_t i = 0; i < running_.size() && *budget > 0;) {
    Request* r = running_[i];
    const int64_t n = std::min(r->num_tokens() - r->num_computed_tokens, *budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    std::optional<SlotAllocation> a;
    while (!(a = kv_.AllocateSlots(KvView(*r), n))) {
      // Out of blocks: the newest running request gives its blocks back.
      Request* victim = running_.back();
      // Un-schedule it if it was already scheduled this step.
      auto it = std::find_if(out->scheduled.begin(), out->scheduled.end(),
                             [&](const ScheduledRequest& s) { return s.request == victim; });
      if (it != out->scheduled.end()) {
        *budget += it->num_tokens;
        out->num_scheduled_tokens -= it->num_tokens;
        out->scheduled.erase(it);
      }
      Preempt(victim, out);
      if (victim == r) break;
    }
    if (!a) break;  // r itself was preempted: it was the newest, nothing after it runs
    out->copies.insert(out->copies.end(), a->copies.begin(), a->copies.end());
    out->scheduled.push_back({r, n});
    out->num_scheduled_tokens += n;
    *budget -= n;
    ++i;
  }
}

void Scheduler::ScheduleWaiting(SchedulerOutput* out, int64_t* budget) {
  while (!waiting_.empty() && *budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    // Prompt logprobs need the logits of every prompt position: no cached prefix.
    ComputedBlocks hit = r->spec.want_prompt_logits
                             ? ComputedBlocks{}
                             : kv_.GetComputedBlocks(r->tokens, r->spec.cache_salt);
    const int64_t n = std::min(r->num_tokens() - hit.num_computed_tokens, *budget);
    KVRequest view = KvView(*r);
    view.num_computed_tokens = 0;
    auto a = kv_.AllocateSlots(view, n, &hit);
    if (!a) break;  // no room: it waits (FCFS, nothing behind it jumps ahead)
    waiting_.pop_front();
    r->num_computed_tokens = hit.num_computed_tokens;
    if (r->num_preemptions == 0) r->num_cached_tokens = hit.num_computed_tokens;
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    out->copies.insert(out->copies.end(), a->copies.begin(), a->copies.end());
    out->scheduled.push_back({r, n});
    out->num_scheduled_tokens += n;
    *budget -= n;
  }
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  ScheduleRunning(&out, &budget);
  if (out.preempted.empty()) ScheduleWaiting(&out, &budget);
  return out;
}

}  // namespace pagoda
