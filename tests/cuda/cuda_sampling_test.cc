// Sampling from logits left on the GPU (LogitsBuffer) against the CPU sampler, and the device
// sampling kernels (kernels/cuda/sampling.h) against a long-double reference.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "kernels/cpu/sampler.h"
#include "kernels/cuda/sampling.h"
#include "kernels/params/sampling_params.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

// The same logits [n, vocab] sampled by the GPU (from its LogitsBuffer) into `grow` and by the
// CPU (a host copy) into `crow`.
void SampleOnBoth(CudaBackend& gpu, Backend& cpu, const std::vector<float>& logits, int64_t n, int64_t vocab,
                  std::vector<SampleRow>& grow, std::vector<SampleRow>& crow) {
  const TensorView buffer = gpu.LogitsBuffer(n, vocab);
  ASSERT_NE(buffer.data, nullptr);
  gpu.Upload(logits.data(), buffer);
  gpu.Sample(buffer, grow);
  std::vector<float> host = logits;
  cpu.Sample(TensorView::F32(host.data(), n, vocab), crow);
}

// Sampling from device logits (LogitsBuffer): greedy rows are chosen on the device and give the
// CPU sampler's tokens (ties to the lowest id, a row starting with NaN, NaN elsewhere skipped);
// drawn, penalized and logprob rows (sampled on the device too) match it.
TEST_F(CudaOpsTest, DeviceSamplingMatchesTheCpuSampler) {
  const int64_t vocab = 5000, n = 7;
  std::vector<float> logits = RandomVector(n * vocab, 77);
  logits[1 * vocab + 17] = logits[1 * vocab + 4000] = 50.0f;
  logits[2 * vocab + 0] = NAN;
  logits[3 * vocab + 9] = NAN;
  logits[3 * vocab + 10] = 40.0f;
  SamplingParams greedy;
  greedy.temperature = 0.0;
  SamplingParams drawn;
  drawn.temperature = 0.8;
  drawn.top_p = 0.9;
  drawn.seed = 5;
  SamplingParams penalized = greedy;
  penalized.repetition_penalty = 1.5;
  SamplingParams with_logprobs = greedy;
  with_logprobs.logprobs = 3;
  const std::vector<SamplingParams> params = {greedy, greedy, greedy, greedy, drawn, penalized, with_logprobs};
  // Row 5's history holds its arg max, which the penalty may push down.
  const int32_t top5 = static_cast<int32_t>(
      std::max_element(logits.begin() + 5 * vocab, logits.begin() + 6 * vocab) - (logits.begin() + 5 * vocab));
  const std::vector<int32_t> prompt = {top5, 3, 8};
  std::vector<std::unique_ptr<SamplerState>> gs, cs;
  std::vector<SampleRow> grow(n), crow(n);
  std::vector<TokenLogprobs> glp(n), clp(n);
  for (int64_t i = 0; i < n; ++i) {
    gs.push_back(gpu_->CreateSampler(params[i]));
    cs.push_back(cpu_.CreateSampler(params[i]));
    for (auto* r : {&grow[i], &crow[i]}) r->prompt = prompt;
    grow[i].state = gs.back().get();
    crow[i].state = cs.back().get();
    if (params[i].logprobs >= 0) {
      grow[i].logprobs = &glp[i];
      crow[i].logprobs = &clp[i];
    }
  }
  SampleOnBoth(*gpu_, cpu_, logits, n, vocab, grow, crow);
  if (HasFatalFailure()) return;
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(grow[i].token, crow[i].token) << "row " << i;
  EXPECT_EQ(grow[1].token, 17);
  EXPECT_EQ(grow[2].token, 0);
  EXPECT_EQ(grow[3].token, 10);
  EXPECT_NEAR(glp[6].logprob, clp[6].logprob, 1e-9);
  EXPECT_EQ(glp[6].rank, clp[6].rank);
  ASSERT_EQ(glp[6].top.size(), 3u);
  ASSERT_EQ(clp[6].top.size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(glp[6].top[t].first, clp[6].top[t].first);
    EXPECT_NEAR(glp[6].top[t].second, clp[6].top[t].second, 1e-9);
  }
  // The device rows were only read: sampling them again (the same LogitsBuffer) gives the same
  // greedy choices.
  gpu_->Sample(gpu_->LogitsBuffer(n, vocab), grow);
  EXPECT_EQ(grow[3].token, 10);
}

// ---- drawn rows against the CPU sampler ----

// Logits for one row: normal with spread 2.5; `ties` rounds them to multiples of 0.5 (hundreds
// of equal logits, +0.0 and -0.0 among them) and flips them to <= 0, so that the top group is
// {-0.0, +0.0} and every top-k / top-p cut splits a group of ties.
std::vector<float> RowLogits(int64_t vocab, uint32_t seed, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.5f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) {
    v = dist(rng);
    if (ties) {
      v = std::round(v * 2.0f) / 2.0f;
      if (v > 0.0f) v = -v;
    }
  }
  return x;
}

struct GridRow {
  SamplingParams params;
  bool logprobs = false;
};

// Every combination of temperature, top-k, top-p, min-p and four penalty settings, drawn; then
// greedy rows with penalties and/or logprobs and plain greedy ones. `every` keeps every n-th
// drawn combination. Each row its own seed; some drawn rows ask for logprobs (k = 0 ... 20).
std::vector<GridRow> Grid(int every, uint64_t seed) {
  struct Penalties {
    double repetition, frequency, presence;
  };
  const Penalties penalties[] = {{1.0, 0.0, 0.0}, {1.3, 0.4, 0.6}, {0.8, 0.0, 0.0}, {1.0, -0.7, -0.3}};
  std::vector<GridRow> rows;
  int index = 0;
  for (double t : {0.25, 0.7, 1.0, 1.8}) {
    for (int64_t k : {0, 1, 7, 50}) {
      // Not round values such as 0.9: in a row whose top group is tied (equal p), top-k 50 and top-p 0.9 put
      // the cut exactly at 45 / 50, where the order of the sums decides (the boundary case the
      // device may break the other way; kernels/cuda/sampling.h).
      for (double top_p : {1.0, 0.87, 0.33}) {
        for (double min_p : {0.0, 0.05, 0.3}) {
          for (const Penalties& pen : penalties) {
            if (index++ % every != 0) continue;
            GridRow r;
            r.params.temperature = t;
            r.params.top_k = k;
            r.params.top_p = top_p;
            r.params.min_p = min_p;
            r.params.repetition_penalty = pen.repetition;
            r.params.frequency_penalty = pen.frequency;
            r.params.presence_penalty = pen.presence;
            r.params.seed = seed + rows.size();
            if (rows.size() % 5 == 2) {
              r.logprobs = true;
              r.params.logprobs = static_cast<int64_t>(rows.size() % 21);
            }
            rows.push_back(r);
          }
        }
      }
    }
  }
  for (int g = 0; g < 8; ++g) {
    GridRow r;
    r.params.temperature = 0.0;
    const Penalties& pen = penalties[g % 4];
    r.params.repetition_penalty = pen.repetition;
    r.params.frequency_penalty = pen.frequency;
    r.params.presence_penalty = pen.presence;
    r.logprobs = g >= 4;
    r.params.logprobs = g >= 4 ? 3 * g - 4 : -1;  // 8, 11, 14, 17
    r.params.seed = seed + rows.size();
    rows.push_back(r);
  }
  return rows;
}

// Runs `steps` steps of sampling the rows on both backends (fresh logits each step, histories
// growing by the CPU's tokens) and expects the same tokens and logprobs. The rows are put in a
// scrambled order so that greedy, drawn and logprob rows mix in the batch.
void ExpectSameAsCpu(CudaBackend* gpu, Backend& cpu, int64_t vocab, std::vector<GridRow> grid, int steps,
                     uint32_t seed) {
  std::shuffle(grid.begin(), grid.end(), std::mt19937(seed));
  const int64_t n = static_cast<int64_t>(grid.size());
  std::vector<std::unique_ptr<SamplerState>> gs, cs;
  std::vector<std::vector<int32_t>> prompts(n), outputs(n);
  std::mt19937 rng(seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    gs.push_back(gpu->CreateSampler(grid[i].params));
    cs.push_back(cpu.CreateSampler(grid[i].params));
    // A history with repeats and two ids out of range (ignored by both).
    const int64_t len = static_cast<int64_t>(rng() % 40);
    for (int64_t j = 0; j < len; ++j) prompts[i].push_back(static_cast<int32_t>(rng() % std::min<int64_t>(vocab, 300)));
    if (i % 3 == 0) prompts[i].push_back(static_cast<int32_t>(vocab + 5));
    if (i % 3 == 1) prompts[i].push_back(-1);
    for (int64_t j = 0; j < len / 2; ++j) outputs[i].push_back(prompts[i][static_cast<size_t>(rng() % len)]);
  }
  int64_t drawn_rows = 0, penalized_moves = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> row = RowLogits(vocab, seed * 7919u + static_cast<uint32_t>(step * n + i), i % 4 == 3);
      // History tokens at the top, so that the penalties reorder the candidates.
      const float top = *std::max_element(row.begin(), row.end());
      for (size_t j = 0; j < std::min<size_t>(prompts[i].size(), 8); ++j) {
        const int32_t id = prompts[i][j];
        if (id >= 0 && id < vocab) row[static_cast<size_t>(id)] = top + 1.0f - 0.25f * static_cast<float>(j);
      }
      std::copy(row.begin(), row.end(), logits.begin() + i * vocab);
    }
    std::vector<SampleRow> grow(n), crow(n);
    std::vector<TokenLogprobs> glp(n), clp(n);
    for (int64_t i = 0; i < n; ++i) {
      for (auto* r : {&grow[i], &crow[i]}) {
        r->prompt = prompts[i];
        r->output = outputs[i];
      }
      grow[i].state = gs[i].get();
      crow[i].state = cs[i].get();
      if (grid[i].logprobs) {
        grow[i].logprobs = &glp[i];
        crow[i].logprobs = &clp[i];
      }
    }
    SampleOnBoth(*gpu, cpu, logits, n, vocab, grow, crow);
    if (::testing::Test::HasFatalFailure()) return;
    for (int64_t i = 0; i < n; ++i) {
      const SamplingParams& p = grid[i].params;
      const std::string what = "vocab " + std::to_string(vocab) + " step " + std::to_string(step) + " row " +
                               std::to_string(i) + ": T " + std::to_string(p.temperature) + " top_k " +
                               std::to_string(p.top_k) + " top_p " + std::to_string(p.top_p) + " min_p " +
                               std::to_string(p.min_p) + " penalties " + std::to_string(p.repetition_penalty) + "/" +
                               std::to_string(p.frequency_penalty) + "/" + std::to_string(p.presence_penalty);
      ASSERT_EQ(grow[i].token, crow[i].token) << what;
      drawn_rows += !p.greedy();
      // The penalties changed the choice from the raw logits' order (they are exercised).
      const float* raw = logits.data() + i * vocab;
      if (p.greedy() && crow[i].token != ArgMax(std::span<const float>(raw, static_cast<size_t>(vocab)))) ++penalized_moves;
      if (!grid[i].logprobs) continue;
      EXPECT_EQ(glp[i].token, clp[i].token) << what;
      EXPECT_NEAR(glp[i].logprob, clp[i].logprob, 1e-9) << what;
      EXPECT_EQ(glp[i].rank, clp[i].rank) << what;
      ASSERT_EQ(glp[i].top.size(), clp[i].top.size()) << what;
      for (size_t t = 0; t < clp[i].top.size(); ++t) {
        EXPECT_EQ(glp[i].top[t].first, clp[i].top[t].first) << what << " top " << t;
        EXPECT_NEAR(glp[i].top[t].second, clp[i].top[t].second, 1e-9) << what << " top " << t;
      }
    }
    for (int64_t i = 0; i < n; ++i) outputs[i].push_back(crow[i].token);
  }
  EXPECT_GT(drawn_rows, 0);
  EXPECT_GT(penalized_moves, 0) << "no greedy row's choice was moved by its penalties";
}

// Every combination of temperature / top-k / top-p / min-p / penalties, with greedy and logprob
// rows in the same batch, three steps in a row (the generators stay in step: one draw per drawn
// row), against the CPU sampler: the same tokens (equality could fail only for a draw within a
// rounding of a boundary, ~1e-15 of the mass: never seen), logprobs within 1e-9, the same top ids.
TEST_F(CudaOpsTest, DrawnRowsMatchTheCpuSamplerOverTheGrid) {
  ExpectSameAsCpu(gpu_, cpu_, 1000, Grid(1, 100), 3, 11);
  ExpectSameAsCpu(gpu_, cpu_, 32000, Grid(1, 5000), 3, 12);
}

// Llama 3's vocabulary plus one: 72 drawn rows, more than SampleChunkRows (65), so the drawn rows
// are sorted in two turns, with penalties in both.
TEST_F(CudaOpsTest, DrawnRowsMatchTheCpuSamplerAtALargeOddVocabulary) {
  ASSERT_LT(cuda::SampleChunkRows(128257), 72);
  ExpectSameAsCpu(gpu_, cpu_, 128257, Grid(8, 9000), 3, 13);
}

// Many seeds on one set of logits: the tokens of 400 requests with the same settings and
// different seeds, step after step, are the CPU's, and they are spread (not one token).
TEST_F(CudaOpsTest, ManySeedsDrawTheCpuSamplersTokens) {
  const int64_t vocab = 4099, n = 400;
  SamplingParams p;
  p.temperature = 1.1;
  p.top_p = 0.95;
  std::vector<std::unique_ptr<SamplerState>> gs, cs;
  for (int64_t i = 0; i < n; ++i) {
    p.seed = 77 + 1000003 * static_cast<uint64_t>(i);
    gs.push_back(gpu_->CreateSampler(p));
    cs.push_back(cpu_.CreateSampler(p));
  }
  std::vector<int32_t> seen;
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> row = RowLogits(vocab, 500 + step, false);
    std::vector<float> logits;
    for (int64_t i = 0; i < n; ++i) logits.insert(logits.end(), row.begin(), row.end());
    std::vector<SampleRow> grow(n), crow(n);
    for (int64_t i = 0; i < n; ++i) {
      grow[i].state = gs[i].get();
      crow[i].state = cs[i].get();
    }
    const TensorView buffer = gpu_->LogitsBuffer(n, vocab);
    gpu_->Upload(logits.data(), buffer);
    gpu_->Sample(buffer, grow);
    cpu_.Sample(TensorView::F32(logits.data(), n, vocab), crow);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(grow[i].token, crow[i].token) << "step " << step << " seed row " << i;
      seen.push_back(grow[i].token);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 20);
}

// Logits that live in host memory still go through the CPU sampler (the same generator): a
// device step and a host step of the same request give the CPU's tokens, in step.
TEST_F(CudaOpsTest, HostAndDeviceStepsShareTheGenerator) {
  const int64_t vocab = 3001;
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 40;
  p.seed = 4242;
  auto g = gpu_->CreateSampler(p);
  auto c = cpu_.CreateSampler(p);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> logits = RowLogits(vocab, 900 + step, false);
    SampleRow gr, cr;
    gr.state = g.get();
    cr.state = c.get();
    if (step % 2 == 0) {
      const TensorView buffer = gpu_->LogitsBuffer(1, vocab);
      gpu_->Upload(logits.data(), buffer);
      gpu_->Sample(buffer, std::span<SampleRow>(&gr, 1));
    } else {
      std::vector<float> host = logits;
      gpu_->Sample(TensorView::F32(host.data(), 1, vocab), std::span<SampleRow>(&gr, 1));
    }
    cpu_.Sample(TensorView::F32(logits.data(), 1, vocab), std::span<SampleRow>(&cr, 1));
    EXPECT_EQ(gr.token, cr.token) << "step " << step;
  }
}

// ---- the kernels against a long-double reference ----

// A row's drawn distribution in long double: the ids by (logit descending, id ascending), the
// kept count after top-k / top-p / min-p, and the cumulative masses of the kept ones.
struct Reference {
  std::vector<int32_t> order;
  std::vector<long double> cum;  // [n]
  int64_t n = 0;
  bool ambiguous = false;  // a cut within 1e-12 of its threshold
};

Reference DrawnReference(const std::vector<float>& x, const SamplingParams& p) {
  Reference r;
  const int64_t vocab = static_cast<int64_t>(x.size());
  r.order.resize(x.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  int64_t n = p.top_k > 0 ? std::min(vocab, p.top_k) : vocab;
  const long double inv_t = 1.0L / p.temperature, m = x[r.order[0]] * inv_t;
  std::vector<long double> prob(static_cast<size_t>(n));
  long double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += prob[i] = std::exp(x[r.order[i]] * inv_t - m);
  if (p.top_p < 1.0) {
    long double cum = 0;
    for (int64_t i = 0; i < n; ++i) {
      cum += prob[i] / sum;
      if (std::fabs(cum - p.top_p) < 1e-12L) r.ambiguous = true;
      if (cum >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0) {
    const long double threshold = p.min_p * prob[0];  // prob[0] = 1
    int64_t keep = 1;
    while (keep < n && prob[keep] >= threshold) ++keep;
    for (int64_t i = 1; i < n; ++i) r.ambiguous |= std::fabs(prob[i] - threshold) < 1e-12L;
    n = keep;
  }
  r.n = n;
  long double cum = 0;
  for (int64_t i = 0; i < n; ++i) r.cum.push_back(cum += prob[i]);
  return r;
}

template <typename T>
std::shared_ptr<T> DeviceArray(size_t count) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), cudaSuccess);
  return std::shared_ptr<T>(static_cast<T*>(p), [](T* q) { (void)cudaFree(q); });
}

// cuda::SampleRows with chosen uniforms: for kept positions i of the long-double reference, the
// uniform at the middle of i's share of the mass picks order[i] (so the device's sort, its
// probabilities and its top-k / top-p / min-p cuts are the reference's: a cut one token off
// moves the last positions); a uniform just under 1 picks the last kept token; one row of logits
// read by many rows of the batch, each with its own uniform. Also a row with all-equal logits.
TEST_F(CudaOpsTest, SampleRowsFollowsALongDoubleReference) {
  for (int64_t vocab : {5003, 50000}) {
    for (int variant = 0; variant < 17; ++variant) {
      SamplingParams p;
      p.temperature = variant % 2 ? 1.3 : 0.5;
      p.top_k = variant / 2 % 2 ? 40 : 0;
      p.top_p = variant / 4 % 2 ? 0.8 : 1.0;
      p.min_p = variant / 8 % 2 ? 0.1 : 0.0;
      std::vector<float> x = RowLogits(vocab, 3000 + variant + static_cast<uint32_t>(vocab), false);
      if (variant == 16) std::fill(x.begin(), x.end(), 1.5f);  // every token tied: ids in order
      const Reference ref = DrawnReference(x, p);
      ASSERT_FALSE(ref.ambiguous) << "variant " << variant << ": pick other logits";
      const long double total = ref.cum.back();
      std::vector<double> uniforms;
      std::vector<int32_t> want;
      for (int64_t i = 0; i < ref.n; i += std::max<int64_t>(1, ref.n / 97)) {
        const long double lo = i > 0 ? ref.cum[i - 1] : 0.0L;
        if ((ref.cum[i] - lo) / total < 1e-12L) continue;  // a share too thin to aim at
        uniforms.push_back(static_cast<double>((lo + ref.cum[i]) / 2 / total));
        want.push_back(ref.order[i]);
      }
      if (ref.n > 1 && (ref.cum[ref.n - 1] - ref.cum[ref.n - 2]) / total > 1e-12L) {
        uniforms.push_back(1.0 - 0x1.0p-53);
        want.push_back(ref.order[ref.n - 1]);
      }
      uniforms.push_back(0.0);
      want.push_back(ref.order[0]);
      const int64_t rows = static_cast<int64_t>(uniforms.size());
      std::vector<cuda::SampleRowParams> params(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        params[r].inv_temperature = 1.0 / p.temperature;
        params[r].top_k = p.top_k;
        params[r].top_p = p.top_p;
        params[r].min_p = p.min_p;
        params[r].uniform = uniforms[r];
      }
      auto d_logits = DeviceArray<float>(x.size());
      auto d_rows = DeviceArray<cuda::SampleRowParams>(params.size());
      auto d_results = DeviceArray<cuda::SampleResult>(params.size());
      const size_t scratch_bytes = cuda::SampleScratchBytes(rows, vocab);
      auto d_scratch = DeviceArray<char>(scratch_bytes);
      ASSERT_EQ(cudaMemcpy(d_logits.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_rows.get(), params.data(), params.size() * sizeof(params[0]), cudaMemcpyHostToDevice),
                cudaSuccess);
      cuda::SampleRowsParams sp;
      sp.logits = d_logits.get();
      sp.row_stride = 0;  // every row reads the one row of logits
      sp.vocab = vocab;
      sp.rows = d_rows.get();
      sp.num_rows = rows;
      sp.num_drawn = rows;
      sp.results = d_results.get();
      sp.scratch = d_scratch.get();
      sp.scratch_bytes = scratch_bytes;
      cuda::SampleRows(sp, nullptr);
      std::vector<cuda::SampleResult> results(static_cast<size_t>(rows));
      ASSERT_EQ(cudaMemcpy(results.data(), d_results.get(), results.size() * sizeof(results[0]), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(results[r].token, want[r]) << "vocab " << vocab << " variant " << variant << " uniform "
                                             << uniforms[r] << " (kept " << ref.n << ")";
      }
    }
  }
}

// Logprobs of a logprob row against a long-double log-softmax: the chosen token's, its rank,
// and the top 20 in (logit descending, id ascending) order, with ties at the top.
TEST_F(CudaOpsTest, DeviceLogprobsFollowALongDoubleReference) {
  const int64_t vocab = 70001;
  std::vector<float> x = RowLogits(vocab, 31337, false);
  for (int32_t id : {5, 900, 70000, 3}) x[id] = 20.0f;  // a four-way tie at the top
  x[12] = -0.0f;
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 3;  // one of the tied tokens
  p.logprobs = 20;
  p.seed = 3;
  auto g = gpu_->CreateSampler(p);
  SampleRow row;
  row.state = g.get();
  TokenLogprobs lp;
  row.logprobs = &lp;
  const TensorView buffer = gpu_->LogitsBuffer(1, vocab);
  gpu_->Upload(x.data(), buffer);
  gpu_->Sample(buffer, std::span<SampleRow>(&row, 1));
  EXPECT_TRUE(row.token == 3 || row.token == 5 || row.token == 900) << row.token;
  long double m = -INFINITY, sum = 0;
  for (float v : x) m = std::max<long double>(m, v);
  for (float v : x) sum += std::exp(static_cast<long double>(v) - m);
  const long double lse = m + std::log(sum);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  EXPECT_EQ(lp.token, row.token);
  EXPECT_NEAR(lp.logprob, static_cast<double>(x[row.token] - lse), 1e-12);
  EXPECT_EQ(lp.rank, 1);  // tied with the best: nothing larger
  ASSERT_EQ(lp.top.size(), 20u);
  for (size_t t = 0; t < 20; ++t) {
    EXPECT_EQ(lp.top[t].first, order[t]) << t;
    EXPECT_NEAR(lp.top[t].second, static_cast<double>(x[order[t]] - lse), 1e-12) << t;
  }
  EXPECT_EQ(lp.top[0].first, 3);
  EXPECT_EQ(lp.top[3].first, 70000);
}


}  // namespace
}  // namespace pagoda
