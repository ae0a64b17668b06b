#include "kernels/cpu/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace pagoda {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f}; }

TEST(SamplerTest, GreedyPicksTheLowestIdAmongTies) {
  SamplingParams p;
  p.temperature = 0.0;
  Sampler s(p);
  auto l = Logits();
  EXPECT_EQ(s.Sample(l, {}, {}), 1);
}

TEST(SamplerTest, LogprobsAreOfTheRawLogitsMostLikelyFirst) {
  SamplingParams p;
  p.temperature = 0.0;
  p.logprobs = 3;
  p.repetition_penalty = 2.0;  // processing must not change the reported logprobs
  Sampler s(p);
  auto l = Logits();
  TokenLogprobs lp;
  const std::vector<int32_t> prompt = {1};
  const int32_t id = s.Sample(l, prompt, {}, &lp);
  EXPECT_EQ(id, 3);  // token 1 was penalized to 1.5
  double lse = 0;
  for (float x : Logits()) lse += std::exp(x);
  lse = std::log(lse);
  EXPECT_NEAR(lp.logprob, 3.0 - lse, 1e-9);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[2].second, 2.0 - lse, 1e-9);
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  p.seed = 99;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) {
    auto la = Logits(), lb = Logits();
    EXPECT_EQ(a.Sample(la, {}, {}), b.Sample(lb, {}, {}));
  }
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  p.seed = 1;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    auto l = Logits();
    EXPECT_EQ(s.Sample(l, {}, {}), 1);
  }
}

TEST(SamplerTest, TopPAndMinPKeepOnlyLikelyTokens) {
  // Probabilities at T=1: tokens 1 and 3 dominate; top_p 0.5 keeps only the first of them.
  SamplingParams p;
  p.top_p = 0.3;
  p.seed = 5;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    auto l = Logits();
    EXPECT_EQ(s.Sample(l, {}, {}), 1);
  }
  SamplingParams m;
  m.min_p = 0.5;  // keeps tokens with p >= 0.5 p_max: ids 1, 3 (2 has e^-1 = 0.37)
  m.seed = 6;
  Sampler sm(m);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 200; ++i) {
    auto l = Logits();
    ++seen[sm.Sample(l, {}, {})];
  }
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
}

TEST(SamplerTest, TemperatureSamplesFollowTheDistribution) {
  SamplingParams p;
  p.seed = 11;
  Sampler s(p);
  std::vector<float> base = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  int ones = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    auto l = base;
    ones += s.Sample(l, {}, {}) == 1;
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.03);
}

TEST(SamplerTest, PenaltiesApplyAsVllmDoes) {
  SamplingParams p;
  p.temperature = 0.0;
  p.frequency_penalty = 1.0;
  Sampler s(p);
  auto l = Logits();
  const std::vector<int32_t> out = {1, 1};  // token 1: 3 - 2 = 1
  EXPECT_EQ(s.Sample(l, {}, out), 3);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
}

TEST(SamplerTest, InvalidParamsAreRejected) {
  SamplingParams p;
  p.top_p = 0.0;
  EXPECT_THROW(p.Validate(), Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(p.Validate(), Error);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_THROW(p.Validate(), Error);
}

// A non-greedy Sample takes exactly one NextUniform from the generator (the GPU's sampler takes
// its draws there), and a greedy one none: two samplers with the same seed stay in step.
TEST(SamplerTest, NextUniformIsTheDrawASampleTakes) {
  SamplingParams p;
  p.seed = 12;
  p.temperature = 0.8;
  Sampler a(p), b(p);
  for (int i = 0; i < 5; ++i) {
    auto l = Logits();
    a.Sample(l, {}, {});
    const double u = b.NextUniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_EQ(a.NextUniform(), b.NextUniform());
  SamplingParams g = p;
  g.temperature = 0.0;
  Sampler c(g), d(g);
  auto l = Logits();
  c.Sample(l, {}, {});
  EXPECT_EQ(c.NextUniform(), d.NextUniform());
  EXPECT_EQ(c.params().temperature, 0.0);
}

// The draw Sample makes is the uniform's share of the kept mass: with logits {0, log 3} at T = 1
// (p = 1/4, 3/4, sorted: token 1 first), u < 3/4 picks token 1, else token 0.
TEST(SamplerTest, TheDrawIsTheUniformsShareOfTheMass) {
  SamplingParams p;
  p.seed = 99;
  Sampler s(p), twin(p);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
    const double u = twin.NextUniform();
    const int32_t want = u < 0.75 - 1e-6 ? 1 : (u > 0.75 + 1e-6 ? 0 : -1);
    const int32_t got = s.Sample(l, {}, {});
    if (want >= 0) {
      EXPECT_EQ(got, want) << "u " << u;
    }
  }
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// ArgMax is "the first index, replaced on strictly greater": on rows with ties, signed zeros,
// infinities and NaN anywhere (a row starting with NaN gives 0).
TEST(SamplerTest, ArgMaxIsTheFirstIndexReplacedOnStrictlyGreater) {
  auto reference = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (size_t i = 1; i < x.size(); ++i) {
      if (x[i] > x[best]) best = static_cast<int32_t>(i);
    }
    return best;
  };
  std::mt19937 rng(5);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 2.0f, -2.0f};
  std::uniform_int_distribution<int> pick(0, 9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> x(1 + trial % 37);
    for (float& v : x) {
      const int k = pick(rng);
      v = k < 7 ? specials[k] : std::round(normal(rng));
    }
    EXPECT_EQ(ArgMax(x), reference(x)) << "trial " << trial;
  }
  EXPECT_EQ(ArgMax(std::vector<float>{-0.0f, 0.0f}), 0);
  EXPECT_EQ(ArgMax(std::vector<float>{-1.0f, 0.0f, -0.0f}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{NAN, 5.0f}), 0);
  EXPECT_EQ(ArgMax(std::vector<float>{1.0f, NAN, 5.0f, 5.0f}), 2);
}

// OrderByLogit is the comparison sort the sampler's order is defined by (largest first, ties
// by lower id, -0.0 equal to +0.0), on values full of ties, signed zeros, infinities and
// denormals, at sizes from 0 to an odd 128K vocabulary.
TEST(SamplerTest, OrderByLogitIsTheComparisonSortsOrder) {
  std::mt19937 rng(11);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 3.5f, -3.5f};
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{128257}}) {
    std::vector<float> x(n);
    std::uniform_int_distribution<int> pick(0, 9);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& v : x) {
      const int k = pick(rng);
      v = k < 8 ? specials[k] : (k == 8 ? std::round(normal(rng)) : normal(rng));  // many ties
    }
    std::vector<int32_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
    std::vector<int32_t> got;
    OrderByLogit(x, &got);
    EXPECT_EQ(got, want) << "n=" << n;
  }
  // NaN ranks as -inf (below every number, ties with -inf by id), as on the device.
  std::vector<int32_t> got;
  OrderByLogit(std::vector<float>{NAN, -INFINITY, 2.0f, NAN}, &got);
  EXPECT_EQ(got, (std::vector<int32_t>{2, 0, 1, 3}));
}

}  // namespace
}  // namespace pagoda
