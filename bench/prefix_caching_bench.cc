// Time to first token with a long shared prefix, with and without automatic prefix
// caching, on the same engine (issue 6's "1024-token shared prefix, 16 requests").
//
//   build/pagoda_bench --benchmark_filter=PrefixCaching
//
// Each iteration sends 16 requests, one after another, that share a 1024-token prefix and
// end in a few unique tokens; the counters report the mean TTFT per request and the
// cached/uncached ratio. Model: dummy:llama-tiny (bf16 weights, 4 layers, dim 256).
#include <benchmark/benchmark.h>

#include <chrono>

#include "engine/engine.h"
#include "model/dummy_weights.h"
#include "model/presets.h"

namespace pagoda {
namespace {

double MeanTtftSeconds(Model& model, bool caching) {
  EngineConfig c;
  c.kv.num_blocks = 4096;
  c.kv.block_size = 16;
  c.kv.dtype = KVCacheDType::kBF16;
  c.scheduler.max_model_len = 2048;
  c.scheduler.max_num_batched_tokens = 2048;
  c.enable_prefix_caching = caching;
  Engine e(model, nullptr, c);
  double total = 0;
  const int kRequests = 16;
  for (int i = 0; i < kRequests; ++i) {
    RequestSpec r;
    for (int j = 0; j < 1024; ++j) r.prompt.push_back(1 + (j * 7) % 30000);
    for (int j = 0; j < 16; ++j) r.prompt.push_back(1 + (i * 31 + j * 13) % 30000);
    r.sampling.temperature = 0;
    r.max_tokens = 1;
    r.ignore_eos = true;
    const auto t0 = std::chrono::steady_clock::now();
    e.AddRequest(r);
    while (e.HasUnfinished()) e.Step();
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return total / kRequests;
}

void BM_PrefixCachingTtft(benchmark::State& state) {
  static auto model = MakeDummyModel(GetPreset("llama-tiny"), "bf16", 0);
  double on = 0, off = 0;
  for (auto _ : state) {
    on = MeanTtftSeconds(*model, true);
    off = MeanTtftSeconds(*model, false);
  }
  state.counters["ttft_ms_with_caching"] = on * 1e3;
  state.counters["ttft_ms_without_caching"] = off * 1e3;
  state.counters["speedup"] = off / on;
}
BENCHMARK(BM_PrefixCachingTtft)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace pagoda
