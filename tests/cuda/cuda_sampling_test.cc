// Sampling from logits left on the GPU (LogitsBuffer) against the CPU sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "kernels/params/sampling_params.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

// Sampling from device logits (LogitsBuffer): greedy rows are chosen on the device and give the
// CPU sampler's tokens (ties to the lowest id, a row starting with NaN, NaN elsewhere skipped);
// drawn, penalized and logprob rows go through the CPU sampler and match it too.
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
  const TensorView buffer = gpu_->LogitsBuffer(n, vocab);
  ASSERT_NE(buffer.data, nullptr);
  gpu_->Upload(logits.data(), buffer);
  gpu_->Sample(buffer, grow);
  std::vector<float> host = logits;
  cpu_.Sample(TensorView::F32(host.data(), n, vocab), crow);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(grow[i].token, crow[i].token) << "row " << i;
  EXPECT_EQ(grow[1].token, 17);
  EXPECT_EQ(grow[2].token, 0);
  EXPECT_EQ(grow[3].token, 10);
  EXPECT_EQ(glp[6].logprob, clp[6].logprob);
  EXPECT_EQ(glp[6].top, clp[6].top);
  // The device rows were only read: sampling again gives the same greedy choices.
  gpu_->Sample(buffer, grow);
  EXPECT_EQ(grow[3].token, 10);
}

}  // namespace
}  // namespace pagoda
