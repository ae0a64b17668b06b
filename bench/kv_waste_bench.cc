// KV waste and concurrency: the paged pool (KVCacheManager) against the contiguous
// baseline (ContiguousAllocator) in the same memory, by a model-free allocation replay.
//
// Workload (fixed seed 2023): 2000 requests, all waiting at t = 0 (an offline batch, so
// both layouts run at their capacity). ShareGPT-like lengths (the vLLM paper's ShareGPT
// means are 161 prompt / 338 output tokens): prompt ~ lognormal(median 100, sigma 1.0),
// output ~ lognormal(median 220, sigma 0.9), clipped to prompt + output <= max_model_len.
// Memory: 65536 token slots (e.g. 8 GiB of llama-3-8b bf16 K/V at 128 KiB per token),
// max_model_len 4096, max_num_seqs 256.
//
// Replay, one engine step at a time (vLLM V1's order): every running request writes the
// token it sampled last step (a decode slot; when the pool is short, the newest running
// request is preempted: freed and requeued, to be recomputed), then waiting requests are
// admitted in FIFO order while their prompt fits (a whole-prompt prefill that also samples
// the first output token). A request frees its slots when its last token is sampled.
//
// Counters (per run; the replay is deterministic, so one iteration suffices):
//   waste_pct        100 x sum over steps (reserved - used) / sum over steps reserved, where
//                    reserved = slots held (paged: blocks in use x block_size; contiguous:
//                    requests x max_model_len) and used = slots holding a token's K/V
//   max_concurrency  most requests running at once;  mean_concurrency: per step
//   steps            engine steps to finish the batch (fewer = more tokens per step)
//   preemptions      requests freed for lack of blocks and recomputed later
//
//   pagoda_bench --benchmark_filter='KVWaste|PrefixHash'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "kv/contiguous_allocator.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

constexpr int64_t kNumSlots = 65536;
constexpr int64_t kMaxModelLen = 4096;
constexpr int64_t kMaxNumSeqs = 256;
constexpr int kNumRequests = 2000;

struct Workload {
  std::vector<int64_t> prompt_len, output_len;
};

const Workload& ShareGptLike() {
  static const Workload w = [] {
    Workload w;
    std::mt19937_64 rng(2023);
    std::lognormal_distribution<double> prompt(std::log(100.0), 1.0);
    std::lognormal_distribution<double> output(std::log(220.0), 0.9);
    for (int i = 0; i < kNumRequests; ++i) {
      int64_t p = std::clamp<int64_t>(std::llround(prompt(rng)), 1, kMaxModelLen - 1);
      int64_t o = std::clamp<int64_t>(std::llround(output(rng)), 1, kMaxModelLen - p);
      w.prompt_len.push_back(p);
      w.output_len.push_back(o);
    }
    return w;
  }();
  return w;
}

// The layouts behind one interface: Prefill(id, n) for a (re)admitted request's n tokens,
// Append(id, pos) for one decode slot at position pos, Free(id), reserved slots.
class PagedLayout {
 public:
  explicit PagedLayout(int32_t block_size)
      : m_({static_cast<int32_t>(kNumSlots / block_size), block_size,
            /*enable_prefix_caching=*/false, PrefixHashAlgo::kSha256}),
        tokens_(kMaxModelLen, 0) {}
  bool Prefill(int64_t id, int64_t n) { return Allocate(id, 0, n); }
  bool Append(int64_t id, int64_t pos) { return Allocate(id, pos, 1); }
  void Free(int64_t id) { m_.Free(id); }
  int64_t reserved() const { return int64_t{m_.num_used_blocks()} * m_.block_size(); }

 private:
  bool Allocate(int64_t id, int64_t num_computed, int64_t n) {
    KVRequest r;
    r.request_id = id;
    r.token_ids = tokens_;  // the ids do not matter without prefix caching
    r.num_computed_tokens = num_computed;
    return m_.AllocateSlots(r, n).has_value();
  }
  KVCacheManager m_;
  std::vector<int32_t> tokens_;
};

class ContiguousLayout {
 public:
  ContiguousLayout() : a_(kNumSlots, kMaxModelLen) {}
  bool Prefill(int64_t id, int64_t n) {
    if (!a_.Admit(id)) return false;
    if (a_.AllocateSlots(id, n)) return true;
    a_.Free(id);
    return false;
  }
  bool Append(int64_t id, int64_t) { return a_.AllocateSlots(id, 1); }
  void Free(int64_t id) { a_.Free(id); }
  int64_t reserved() const { return a_.num_reserved_tokens(); }

 private:
  ContiguousAllocator a_;
};

struct ReplayResult {
  double waste = 0, mean_concurrency = 0;
  int64_t max_concurrency = 0, steps = 0, preemptions = 0, output_tokens = 0;
};

template <typename Layout>
ReplayResult Replay(Layout& layout, const Workload& w) {
  struct Running {
    int64_t id, num_computed, num_generated;
  };
  std::deque<int64_t> waiting;
  std::vector<int64_t> generated(w.prompt_len.size(), 0);  // survives preemption
  for (size_t i = 0; i < w.prompt_len.size(); ++i) waiting.push_back(static_cast<int64_t>(i));
  std::vector<Running> running;  // in admission order: the back is the newest
  ReplayResult res;
  double sum_reserved = 0, sum_unused = 0, sum_running = 0;
  while (!waiting.empty() || !running.empty()) {
    ++res.steps;
    // Decode: each running request writes the token it sampled last step.
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      if (!layout.Append(r.id, r.num_computed)) {
        // Preempt the newest request (maybe r itself); it will be recomputed.
        Running victim = running.back();
        running.pop_back();
        layout.Free(victim.id);
        generated[victim.id] = victim.num_generated;
        waiting.push_front(victim.id);
        ++res.preemptions;
        continue;  // retry r (or stop if r was the victim: i == size now)
      }
      ++r.num_computed;
      ++r.num_generated;
      ++res.output_tokens;
      if (r.num_generated == w.output_len[r.id]) {
        layout.Free(r.id);
        running.erase(running.begin() + i);
      } else {
        ++i;
      }
    }
    // Prefill: admit FIFO while the prompt (plus outputs to recompute) fits.
    while (!waiting.empty() && static_cast<int64_t>(running.size()) < kMaxNumSeqs) {
      const int64_t id = waiting.front();
      const int64_t n = w.prompt_len[id] + std::max<int64_t>(0, generated[id] - 1);
      if (!layout.Prefill(id, n)) break;
      waiting.pop_front();
      const int64_t num_generated = std::max<int64_t>(1, generated[id]);
      if (generated[id] == 0) ++res.output_tokens;  // the prefill samples the first token
      if (num_generated == w.output_len[id]) {
        layout.Free(id);
      } else {
        running.push_back({id, n, num_generated});
      }
    }
    int64_t used = 0;
    for (const Running& r : running) used += r.num_computed;
    sum_reserved += static_cast<double>(layout.reserved());
    sum_unused += static_cast<double>(layout.reserved() - used);
    sum_running += static_cast<double>(running.size());
    res.max_concurrency = std::max<int64_t>(res.max_concurrency, running.size());
  }
  res.waste = sum_reserved > 0 ? sum_unused / sum_reserved : 0.0;
  res.mean_concurrency = sum_running / static_cast<double>(res.steps);
  return res;
}

void Report(benchmark::State& state, const ReplayResult& r) {
  state.counters["waste_pct"] = 100.0 * r.waste;
  state.counters["max_concurrency"] = static_cast<double>(r.max_concurrency);
  state.counters["mean_concurrency"] = r.mean_concurrency;
  state.counters["steps"] = static_cast<double>(r.steps);
  state.counters["preemptions"] = static_cast<double>(r.preemptions);
  state.counters["output_tokens"] = static_cast<double>(r.output_tokens);
}

void BM_KVWaste_Paged(benchmark::State& state) {
  ReplayResult r;
  for (auto _ : state) {
    PagedLayout layout(static_cast<int32_t>(state.range(0)));
    r = Replay(layout, ShareGptLike());
    benchmark::DoNotOptimize(r);
  }
  Report(state, r);
}
BENCHMARK(BM_KVWaste_Paged)
    ->ArgName("block_size")
    ->Arg(8)->Arg(16)->Arg(32)->Arg(64)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_KVWaste_Contiguous(benchmark::State& state) {
  ReplayResult r;
  for (auto _ : state) {
    ContiguousLayout layout;
    r = Replay(layout, ShareGptLike());
    benchmark::DoNotOptimize(r);
  }
  Report(state, r);
}
BENCHMARK(BM_KVWaste_Contiguous)->Iterations(1)->Unit(benchmark::kMillisecond);

// What --prefix-caching-hash-algo costs: keys per second for 16-token blocks.
void BM_PrefixHash(benchmark::State& state) {
  const auto algo = static_cast<PrefixHashAlgo>(state.range(0));
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[i] = 1000 + 7 * i;
  BlockHash h = HashBlockTokens(algo, nullptr, tokens, "");
  for (auto _ : state) {
    h = HashBlockTokens(algo, &h, tokens, "");
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(PrefixHashAlgoName(algo)));
}
BENCHMARK(BM_PrefixHash)
    ->Arg(static_cast<int>(PrefixHashAlgo::kSha256))
    ->Arg(static_cast<int>(PrefixHashAlgo::kXxh3_128));

}  // namespace
}  // namespace pagoda
