// The `pagoda` binary end to end: generate/tokenize output formats, --json purity
// (stdout holds exactly one JSON document), and errors with exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace pagoda {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout only
};

CliRun Pagoda(const std::string& args) {
  const std::string cmd = std::string(PAGODA_BINARY) + " " + args + " 2>/dev/null";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Stories(const std::string& f) { return testing::Fixture("models/stories260K/" + f); }

TEST(CliTest, GenerateJsonFromBosMatchesTheReference) {
  const CliRun r = Pagoda("generate --model " + Stories("stories260K.gguf") +
                       " --temperature 0 --max-tokens 20 --json --logprobs 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);  // throws if stdout holds anything else
  std::ifstream in(Stories("expected_greedy.json"));
  const auto expected = nlohmann::json::parse(in).at("token_ids").get<std::vector<int>>();
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int>>(), std::vector<int>{1});
  const auto ids = j.at("ids").get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 20u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], expected[i + 1]);
  EXPECT_EQ(j.at("text").get<std::string>().rfind("Once upon a time", 0), 0u) << j.at("text");
  const auto& lps = j.at("logprobs");
  ASSERT_EQ(lps.size(), 20u);
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].at("token").get<int>(), ids[i]);
    ASSERT_EQ(lps[i].at("top").size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(lps[i].at("top")[0][0].get<int>(), ids[i]);
    EXPECT_DOUBLE_EQ(lps[i].at("top")[0][1].get<double>(), lps[i].at("logprob").get<double>());
    EXPECT_LE(lps[i].at("logprob").get<double>(), 0.0);
  }
}

TEST(CliTest, PromptIdsAreUsedAsGivenAndSeedsRepeat) {
  const std::string base = "generate --model " + Stories("stories260K.bin") + " --tokenizer " +
                           Stories("tok512.bin") + " --prompt-ids 1,403,407 --max-tokens 12 --json";
  const CliRun a = Pagoda(base + " --temperature 0.9 --top-p 0.9 --seed 5");
  const CliRun b = Pagoda(base + " --temperature 0.9 --top-p 0.9 --seed 5");
  ASSERT_EQ(a.exit_code, 0);
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja.at("prompt_ids").get<std::vector<int>>(), (std::vector<int>{1, 403, 407}));
  EXPECT_EQ(ja.at("ids"), jb.at("ids"));
}

TEST(CliTest, MaxModelLenStopsGeneration) {
  const CliRun r = Pagoda("generate --model " + Stories("stories260K.gguf") +
                       " --temperature 0 --max-model-len 10 --json");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("ids").size(), 9u);  // 1 prompt + 9 = 10
}

TEST(CliTest, DummyModelRunsWithoutFiles) {
  const CliRun r = Pagoda("generate --model dummy:llama-tiny --dtype f32 --prompt-ids 1,2,3 --max-tokens 4 "
                       "--temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("ids").size(), 4u);
}

// --tensor-parallel-size 2 on the CPU: the embedded pagoda-tiny (q8_0, 2 KV heads) sharded over
// two ranks gives the unsharded greedy text; 3 ranks do not divide its KV heads.
TEST(CliTest, TensorParallelGenerateGivesTheUnshardedText) {
  const std::string args = "generate --prompt \"Once upon a time\" --max-tokens 24 --temperature 0";
  const CliRun one = Pagoda(args), two = Pagoda(args + " --tensor-parallel-size 2");
  ASSERT_EQ(one.exit_code, 0);
  ASSERT_EQ(two.exit_code, 0);
  EXPECT_FALSE(one.out.empty());
  EXPECT_EQ(two.out, one.out);
  const CliRun three = Pagoda(args + " --tensor-parallel-size 3");
  EXPECT_EQ(three.exit_code, 1);
  EXPECT_EQ(three.out, "");
}

// The planner takes serve's flag name and recommends it back, with the same KV split.
TEST(CliTest, PlanTakesAndRecommendsTheTensorParallelSize) {
  const CliRun r = Pagoda("plan --model llama-3-70b --gpu h200 --tensor-parallel-size 4 --context 32K --concurrency 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("recommended").at("tensor_parallel_size").get<int64_t>(), 4);
  const CliRun text = Pagoda("plan --model llama-3-70b --gpu h200 --tensor-parallel-size 4 --context 32K --concurrency 8");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("--tensor-parallel-size"), std::string::npos) << text.out;
}

TEST(CliTest, ErrorsExitNonZeroWithNothingOnStdout) {
  for (const std::string& args :
       {std::string("generate --model /nonexistent.gguf"), std::string("generate --model dummy:no-such-preset"),
        std::string("generate --max-tokens"), std::string("generate --model dummy:llama-tiny --temperature abc"),
        "generate --model " + Stories("stories260K.gguf") + " --prompt-ids 1,x",
        "generate --model " + Stories("stories260K.gguf") + " --max-tokens 0",
        "bench latency --model " + Stories("stories260K.gguf") + " --input-len 0 --json",
        "bench latency --model " + Stories("stories260K.gguf") + " --num-iters 0 --json",
        "bench latency --model " + Stories("stories260K.gguf") + " --output-len 0 --json"}) {
    const CliRun r = Pagoda(args);
    EXPECT_GE(r.exit_code, 1) << args;
    EXPECT_LE(r.exit_code, 127) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

TEST(CliTest, BenchLatencyJsonReportsEveryRunAgainstItsBoundsAndTheTimeByKernel) {
  const CliRun r = Pagoda("bench latency --model " + Stories("stories260K.gguf") +
                          " --input-len 16 --output-len 4 --num-iters 2 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0);
  const auto j = nlohmann::json::parse(r.out);  // throws if stdout holds anything else
  constexpr int kLayers = 5;                    // stories260K
  const auto& runs = j.at("runs");
  ASSERT_EQ(runs.size(), 2u);
  // A phase's bound is the mean rate of its passes: between the slowest and the fastest.
  auto expect_mean_between_passes = [](const nlohmann::json& run, const char* passes, const char* mean) {
    double slow = 1e30, fast = 0;
    for (const auto& g : run.at(passes)) {
      slow = std::min(slow, g.get<double>());
      fast = std::max(fast, g.get<double>());
    }
    EXPECT_GE(run.at(mean).get<double>(), slow * (1 - 1e-9)) << mean;
    EXPECT_LE(run.at(mean).get<double>(), fast * (1 + 1e-9)) << mean;
  };
  double lo = 1e30, hi = 0;
  for (const auto& run : runs) {
    const double tps = run.at("prefill_tokens_per_s").get<double>();
    lo = std::min(lo, tps);
    hi = std::max(hi, tps);
    EXPECT_GT(run.at("prefill_bound_tokens_per_s").get<double>(), 0.0);
    EXPECT_NEAR(run.at("prefill_fraction_of_bound").get<double>(),
                tps / run.at("prefill_bound_tokens_per_s").get<double>(), 1e-9);
    EXPECT_GT(run.at("decode_fraction_of_bound").get<double>(), 0.0);
    EXPECT_NEAR(run.at("decode_fraction_of_bound").get<double>(),
                run.at("decode_tokens_per_s").get<double>() / run.at("decode_bound_tokens_per_s").get<double>(), 1e-9);
    EXPECT_GT(run.at("decode_fraction_of_best_probe_bound").get<double>(), 0.0);
    ASSERT_EQ(run.at("read_gbs_before_after").size(), 2u);
    EXPECT_GT(run.at("read_gbs_before_after")[0].get<double>(), 0.0);
    // One read pass after each decode step here (4 steps, at most 8 passes), and the decode
    // bound is their mean rate: between the slowest and the fastest pass.
    ASSERT_EQ(run.at("read_gbs_interleaved_passes").size(), 4u);
    expect_mean_between_passes(run, "read_gbs_interleaved_passes", "read_gbs_interleaved_mean");
    EXPECT_GT(run.at("fma_gflops_before_after")[1].get<double>(), 0.0);
    // One FMA and one int8 peak pass at the entry of each of the 5 layers (at most 8), and the
    // prefill bound (stories260K's f32 GEMMs and attention both at the FMA peak) at their mean
    // rate: between the slowest and the fastest pass.
    ASSERT_EQ(run.at("fma_gflops_interleaved_passes").size(), static_cast<size_t>(kLayers));
    ASSERT_EQ(run.at("int8_gops_interleaved_passes").size(), static_cast<size_t>(kLayers));
    expect_mean_between_passes(run, "fma_gflops_interleaved_passes", "fma_gflops_interleaved_mean");
    const double fma_mean = run.at("fma_gflops_interleaved_mean").get<double>();
    EXPECT_NEAR(run.at("prefill_bound_tokens_per_s").get<double>(),
                fma_mean * 1e9 / j.at("flops_per_prefill_token").get<double>(),
                1e-6 * run.at("prefill_bound_tokens_per_s").get<double>());
    EXPECT_GT(run.at("prefill_fraction_of_best_probe_bound").get<double>(), 0.0);
    // One attention, one KV write and two RoPE calls per layer and step; two norms per layer
    // plus the final one.
    const auto& pre = run.at("prefill_time_by_kernel");
    const auto& dec = run.at("decode_time_by_kernel");
    EXPECT_EQ(pre.at("attention").at("calls").get<int>(), kLayers);
    EXPECT_EQ(pre.at("kv write").at("calls").get<int>(), kLayers);
    EXPECT_EQ(pre.at("rope").at("calls").get<int>(), 2 * kLayers);
    EXPECT_EQ(pre.at("norm").at("calls").get<int>(), 2 * kLayers + 1);
    EXPECT_EQ(dec.at("attention").at("calls").get<int>(), 4 * kLayers);
    EXPECT_GT(pre.at("matmul").at("gops_per_s").get<double>(), 0.0);
    double shares = 0;
    for (const auto& [kind, k] : pre.items()) {
      EXPECT_GE(k.at("share").get<double>(), 0.0) << kind;  // "other" included: timers nest in the phase
      shares += k.at("share").get<double>();
    }
    EXPECT_NEAR(shares, 1.0, 1e-9);
  }
  // The reported speed is the median: with two runs, their mean.
  EXPECT_NEAR(j.at("prefill_tokens_per_s").get<double>(), (lo + hi) / 2, 1e-6 * hi);
}

}  // namespace
}  // namespace pagoda
