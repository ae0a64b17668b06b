// The continuous-batching engine on a real model (stories260K): outputs do not depend on
// the batch, prefix-cache hits, chunking or preemption; n > 1 and stop strings.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "engine/generator.h"
#include "kv/kv_cache_config.h"
#include "model/dummy_weights.h"
#include "model/model.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(testing::Fixture("models/stories260K/stories260K.bin"));
    tokenizer_ = LoadTokenizerForModel(testing::Fixture("models/stories260K/stories260K.bin"),
                                       testing::Fixture("models/stories260K/tok512.bin"),
                                       model_->spec().vocab_size);
  }

  EngineConfig Config(int64_t num_blocks, int64_t block_size = 16, bool prefix_caching = true,
                      int64_t budget = 2048) {
    return testing::SmallEngineConfig(num_blocks, block_size, prefix_caching, budget, KVCacheDType::kF32);
  }

  // Greedy output of one request run alone through the simple Generator.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return testing::GreedyAlone(*model_, prompt, max_tokens, DType::kF32, 256);
  }

  std::map<int64_t, std::vector<int32_t>> RunAll(Engine& e, const std::vector<RequestSpec>& specs,
                                                 std::map<int64_t, std::string>* texts = nullptr) {
    return testing::RunEngine(e, specs, texts);
  }

  std::vector<RequestSpec> Specs(int n, int64_t prompt_len, int64_t max_tokens, bool shared_prefix) {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      RequestSpec s;
      s.prompt.push_back(1);
      for (int64_t j = 1; j < prompt_len + (i % 3); ++j) {
        s.prompt.push_back(static_cast<int32_t>(shared_prefix && j < prompt_len - 5 ? 260 + j % 200
                                                                                   : 3 + (i * 37 + j * 11) % 500));
      }
      s.sampling.temperature = 0;
      s.max_tokens = max_tokens;
      s.ignore_eos = true;
      specs.push_back(s);
    }
    return specs;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(EngineTest, ConcurrentRequestsGetTheirAloneOutputs) {
  Engine e(*model_, tokenizer_.get(), Config(256));
  const auto specs = Specs(12, 40, 30, false);
  const auto out = RunAll(e, specs);
  ASSERT_EQ(out.size(), specs.size());
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, 30)) << "request " << id;
    ++i;
  }
}

TEST_F(EngineTest, PrefixCachingDoesNotChangeOutputs) {
  const auto specs = Specs(8, 100, 20, /*shared_prefix=*/true);
  Engine on(*model_, tokenizer_.get(), Config(256, 16, true));
  Engine off(*model_, tokenizer_.get(), Config(256, 16, false));
  // Warm the cache with the first request, then run all.
  RunAll(on, {specs[0]});
  const auto a = RunAll(on, specs);
  const auto b = RunAll(off, specs);
  ASSERT_EQ(a.size(), b.size());
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) EXPECT_EQ(ia->second, ib->second);
  EXPECT_GT(on.Stats().prefix_cache.num_hit_tokens, 0);
  EXPECT_EQ(off.Stats().prefix_cache.num_hit_tokens, 0);
}

TEST_F(EngineTest, ChunkedPrefillAndBlockSizeDoNotChangeOutputs) {
  const auto specs = Specs(4, 120, 10, false);
  Engine big(*model_, tokenizer_.get(), Config(256, 16, true, 4096));
  Engine chunked(*model_, tokenizer_.get(), Config(4096, 1, true, 37));
  const auto a = RunAll(big, specs);
  const auto b = RunAll(chunked, specs);
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) EXPECT_EQ(ia->second, ib->second);
}

TEST_F(EngineTest, PreemptionUnderATinyCacheLosesNothing) {
  // 20 blocks of 16 = 320 tokens for 10 requests of ~100: most must be preempted.
  Engine e(*model_, tokenizer_.get(), Config(20, 16, true));
  const auto specs = Specs(10, 60, 60, false);
  const auto out = RunAll(e, specs);
  EXPECT_GT(e.Stats().num_preemptions, 0);
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, 60)) << "request " << id;
    ++i;
  }
}

// Decode steps padded to a few batch sizes (--cuda-graph-sizes) with rows on a spare block:
// the real rows' tokens do not change, as requests finish at different steps (every batch
// size from 12 down to 1) and under preemption.
TEST_F(EngineTest, PaddedDecodeBatchesGiveTheUnpaddedOutputs) {
  EngineConfig config = Config(256);
  config.decode_batch_sizes = {1, 2, 4, 8, 16};
  Engine e(*model_, tokenizer_.get(), config);
  auto specs = Specs(12, 40, 30, false);
  for (size_t i = 0; i < specs.size(); ++i) specs[i].max_tokens = 5 + 3 * static_cast<int64_t>(i);
  const auto out = RunAll(e, specs);
  ASSERT_EQ(out.size(), specs.size());
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, specs[i].max_tokens)) << "request " << id;
    ++i;
  }

  EngineConfig tiny = Config(20, 16, true);
  tiny.decode_batch_sizes = {4, 8};
  Engine t(*model_, tokenizer_.get(), tiny);
  const auto tiny_specs = Specs(10, 60, 60, false);
  const auto tiny_out = RunAll(t, tiny_specs);
  EXPECT_GT(t.Stats().num_preemptions, 0);
  i = 0;
  for (const auto& [id, ids] : tiny_out) {
    EXPECT_EQ(ids, Alone(tiny_specs[i].prompt, 60)) << "request " << id << " (preempted cache)";
    ++i;
  }
}

// The CPU backend, saying (as the CUDA backend does) that its decode steps run as graphs that
// differ at these contexts; it records each step's sequences and longest context.
class GraphingCpuBackend : public CpuBackend {
 public:
  std::vector<int64_t> DecodeGraphContexts(int64_t max_len, const KVCache& /*cache*/) const override {
    return {1, 17, max_len};
  }
  void BeginStep(const StepDescription& step, KVCache& cache) override {
    int32_t longest = 0;
    for (int32_t len : step.seq_lens) longest = std::max(longest, len);
    steps.emplace_back(step.num_seqs(), longest);
    if (step.num_tokens() == step.num_seqs()) decode_batches.push_back(step.num_seqs());
    CpuBackend::BeginStep(step, cache);
  }
  std::vector<std::pair<int64_t, int32_t>> steps;  // (sequences, longest context)
  std::vector<int64_t> decode_batches;             // sequences of each one-token-a-sequence step
};

// With padding on, the engine warms up every (batch size, graph context) twice before the first
// request (the widest step first), then runs every decode step at a configured size.
TEST_F(EngineTest, StartUpWarmsUpEveryDecodeGraphThenPadsToItsSizes) {
  GraphingCpuBackend backend;
  LoadOptions options;
  options.backend = &backend;
  auto model = LoadModel(testing::Fixture("models/stories260K/stories260K.bin"), options);
  EngineConfig config = Config(256);
  config.decode_batch_sizes = {1, 2, 4, 100};  // 100 > max_num_seqs (64): dropped
  Engine e(*model, tokenizer_.get(), config);
  const int64_t max_len = config.scheduler.max_model_len;
  std::vector<std::pair<int64_t, int32_t>> want = {{4, static_cast<int32_t>(max_len)}};
  for (int64_t batch : {1, 2, 4}) {
    for (int64_t context : {int64_t{1}, int64_t{17}, max_len}) {
      want.emplace_back(batch, static_cast<int32_t>(context));
      want.emplace_back(batch, static_cast<int32_t>(context));
    }
  }
  EXPECT_EQ(backend.steps, want);

  backend.decode_batches.clear();
  auto specs = Specs(3, 20, 12, false);
  specs[1].max_tokens = 6;
  const auto out = RunAll(e, specs);
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, specs[i].max_tokens)) << "request " << id;
    ++i;
  }
  ASSERT_FALSE(backend.decode_batches.empty());
  EXPECT_EQ(backend.decode_batches.front(), 4) << "3 sequences decode at the next size";
  EXPECT_EQ(backend.decode_batches.back(), 2) << "the last 2 sequences decode at size 2";
  for (int64_t seqs : backend.decode_batches) {
    EXPECT_TRUE(seqs == 2 || seqs == 4) << seqs << " sequences in a decode step";
  }
}

TEST_F(EngineTest, ParallelSamplesShareThePromptAndAreSeeded) {
  Engine e(*model_, tokenizer_.get(), Config(256));
  RequestSpec s = Specs(1, 50, 20, false)[0];
  s.n = 3;
  s.sampling.temperature = 0.8;
  s.sampling.seed = 7;
  const auto out = RunAll(e, {s});
  ASSERT_EQ(out.size(), 3u);
  for (const auto& [id, ids] : out) EXPECT_EQ(ids.size(), 20u);
  // The same request again gives the same three samples.
  Engine e2(*model_, tokenizer_.get(), Config(256));
  const auto again = RunAll(e2, {s});
  auto a = out.begin();
  for (auto b = again.begin(); b != again.end(); ++a, ++b) EXPECT_EQ(a->second, b->second);
}

TEST_F(EngineTest, StopStringIsNeverEmitted) {
  Engine e(*model_, tokenizer_.get(), Config(256));
  RequestSpec s;
  s.prompt = tokenizer_->Encode("Once upon a time", EncodeOptions{});
  s.sampling.temperature = 0;
  s.max_tokens = 200;
  // Find a stop string from the unconstrained greedy text.
  std::map<int64_t, std::string> texts;
  RunAll(e, {s}, &texts);
  const std::string full = texts.begin()->second;
  const size_t at = full.find("Lily");
  ASSERT_NE(at, std::string::npos) << full;
  s.stop = {"Lily"};
  Engine e2(*model_, tokenizer_.get(), Config(256));
  texts.clear();
  RunAll(e2, {s}, &texts);
  EXPECT_EQ(texts.begin()->second, full.substr(0, at));
}

TEST_F(EngineTest, InvalidRequestsAreRejectedWithoutHarm) {
  Engine e(*model_, tokenizer_.get(), Config(256));
  RequestSpec bad;
  EXPECT_THROW(e.AddRequest(bad), Error);  // empty prompt
  bad.prompt = {1, 99999};
  EXPECT_THROW(e.AddRequest(bad), Error);  // outside the vocabulary
  bad.prompt = {1, 2};
  bad.max_tokens = 1000;
  EXPECT_THROW(e.AddRequest(bad), Error);  // longer than max_model_len
  bad.max_tokens = 0;
  EXPECT_THROW(e.AddRequest(bad), Error);
  const auto specs = Specs(2, 20, 5, false);
  const auto out = RunAll(e, specs);
  EXPECT_EQ(out.size(), 2u);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// A small random model with a long context, for prefix-caching scenarios.
std::unique_ptr<Model> SmallLongContextModel() {
  ModelSpec s;
  s.name = "test-long";
  s.architecture = "llama";
  s.vocab_size = 512;
  s.dim = 64;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.ffn_dim = 128;
  s.rope.dim = 16;
  s.max_position = 2048;
  s.tied_embeddings = true;
  return MakeDummyModel(s, "f32", 3);
}

TEST(PrefixCachingTest, SharedPrefixOf1024TokensGivesIdenticalOutputsWithAndWithoutCaching) {
  auto model = SmallLongContextModel();
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 16; ++i) {
    RequestSpec r;
    for (int j = 0; j < 1024; ++j) r.prompt.push_back(1 + (j * 7) % 500);  // the shared prefix
    for (int j = 0; j < 8 + i; ++j) r.prompt.push_back(1 + (i * 31 + j * 13) % 500);
    r.sampling.temperature = 0;
    r.max_tokens = 6;
    r.ignore_eos = true;
    specs.push_back(r);
  }
  auto run = [&](bool caching) {
    EngineConfig c;
    c.kv.num_blocks = 2048;
    c.kv.block_size = 16;
    c.kv.dtype = KVCacheDType::kF32;
    c.scheduler.max_model_len = 2048;
    c.scheduler.max_num_batched_tokens = 2048;
    c.enable_prefix_caching = caching;
    Engine e(*model, nullptr, c);
    std::vector<std::vector<int32_t>> outs;
    // One request at a time, as arrivals spaced apart: each later one can hit the prefix.
    for (const auto& s : specs) {
      const int64_t id = e.AddRequest(s);
      std::vector<int32_t> ids;
      while (e.HasUnfinished()) {
        for (const auto& o : e.Step()) {
          if (o.request_id == id) ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        }
      }
      outs.push_back(ids);
    }
    return std::make_pair(outs, e.Stats().prefix_cache);
  };
  const auto [with, stats_on] = run(true);
  const auto [without, stats_off] = run(false);
  EXPECT_EQ(with, without);
  // 15 of the 16 requests hit the 64 full blocks of the shared prefix.
  EXPECT_EQ(stats_on.num_hit_tokens, 15 * 1024);
  EXPECT_EQ(stats_off.num_hit_tokens, 0);
}

}  // namespace
}  // namespace pagoda
