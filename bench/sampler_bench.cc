// The CPU backend's Sample over a batch of rows (Llama-3's 128256-token vocabulary, random
// logits): every row drawn with temperature 0.7 (a full sort of the vocabulary each), or
// greedy. Rows of different requests are sampled in parallel (CpuBackend::Sample); the
// benchmark's thread count argument caps the team (1: the rows one after another).
//
//   build/pagoda_bench --benchmark_filter=CpuSample
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/parallel.h"

namespace pagoda {
namespace {

void CpuSample(benchmark::State& state, double temperature) {
  const int64_t batch = state.range(0), vocab = 128256;
  const int threads = static_cast<int>(state.range(1));
  const int saved = NumThreads();
  SetNumThreads(threads);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> logits(static_cast<size_t>(batch * vocab));
  for (float& x : logits) x = dist(rng);
  CpuBackend cpu;
  SamplingParams params;
  params.temperature = temperature;
  params.seed = 1;
  std::vector<std::unique_ptr<SamplerState>> states;
  std::vector<SampleRow> rows(static_cast<size_t>(batch));
  for (auto& r : rows) {
    states.push_back(cpu.CreateSampler(params));
    r.state = states.back().get();
  }
  std::vector<float> work(logits.size());
  for (auto _ : state) {
    state.PauseTiming();
    work = logits;  // Sample may modify host rows (penalties)
    state.ResumeTiming();
    cpu.Sample(TensorView::F32(work.data(), batch, vocab), rows);
    benchmark::DoNotOptimize(rows[0].token);
  }
  SetNumThreads(saved);
  state.counters["us_per_row"] =
      benchmark::Counter(static_cast<double>(batch) * 1e-6, benchmark::Counter::kIsIterationInvariantRate |
                                                                benchmark::Counter::kInvert);
}

void BM_CpuSampleDrawn(benchmark::State& state) { CpuSample(state, 0.7); }
void BM_CpuSampleGreedy(benchmark::State& state) { CpuSample(state, 0.0); }
BENCHMARK(BM_CpuSampleDrawn)->Args({64, 1})->Args({64, 2})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CpuSampleGreedy)->Args({64, 1})->Args({64, 2})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace pagoda
