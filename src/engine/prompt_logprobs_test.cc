// Prompt logprobs (echo, prompt_logprobs) on a real model (stories260K): the engine's
// values equal a plain forward of the whole sequence on a fresh cache (what `pagoda eval`
// runs), whether the prompt is in the prefix cache or not and however it is chunked; they
// come once, with the first output; a request that wants them takes no prefix-cache hit.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::TokFixture;

// log_softmax(logits at p)[ids[p + 1]] for every p, from one forward of all of `ids` on a
// fresh f32 cache with a reversed block table (the forward of eval's SequenceLogits).
std::vector<double> ReferenceLogprobs(Model& model, const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), bs = 16, vocab = model.spec().vocab_size;
  const int64_t num_blocks = (n + bs - 1) / bs;
  std::unique_ptr<KVCache> cache = model.backend().CreateKVCache(model.KVShapeFor(num_blocks, bs, DType::kF32));
  std::vector<int32_t> table(num_blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  std::vector<float> logits(n * vocab);
  StepBuilder builder;
  ForwardSequence(model, *cache, builder, ids, 0, n, table, LogitRows::kAll, logits.data());
  std::vector<double> out;
  for (int64_t p = 0; p + 1 < n; ++p) {
    const float* row = &logits[p * vocab];
    double m = -INFINITY, z = 0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, double{row[v]});
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(double{row[v]} - m);
    out.push_back(double{row[ids[p + 1]]} - m - std::log(z));
  }
  return out;
}

class PromptLogprobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(TokFixture("models/stories260K/stories260K.bin"));
    tokenizer_ = LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 512);
    prompt_ = tokenizer_->Encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park with her friends and her dog",
        EncodeOptions{});
    ASSERT_GT(prompt_.size(), 32u);  // two full blocks of 16: something to cache
  }

  EngineConfig Config(bool prefix_caching, int64_t budget = 2048) {
    EngineConfig c;
    c.kv.num_blocks = 64;
    c.kv.block_size = 16;
    c.kv.dtype = KVCacheDType::kF32;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = budget;
    c.enable_prefix_caching = prefix_caching;
    return c;
  }

  RequestSpec Spec(int64_t prompt_logprobs) {
    RequestSpec s;
    s.prompt = prompt_;
    s.sampling.temperature = 0;
    s.max_tokens = 3;
    s.ignore_eos = true;
    s.prompt_logprobs = prompt_logprobs;
    return s;
  }

  // Runs one request to the end; returns all its outputs.
  std::vector<RequestOutput> Run(Engine& e, RequestSpec spec) {
    const int64_t id = e.AddRequest(std::move(spec));
    std::vector<RequestOutput> outs;
    while (e.HasUnfinished()) {
      for (RequestOutput& o : e.Step()) {
        if (o.request_id == id) outs.push_back(std::move(o));
      }
    }
    return outs;
  }

  void ExpectMatchesReference(const std::vector<RequestOutput>& outs, int64_t k) {
    ASSERT_FALSE(outs.empty());
    const std::vector<double> want = ReferenceLogprobs(*model_, prompt_);
    const std::vector<TokenLogprobs>& got = outs[0].prompt_logprobs;
    ASSERT_EQ(got.size(), prompt_.size() - 1);
    for (size_t p = 0; p < got.size(); ++p) {
      EXPECT_EQ(got[p].token, prompt_[p + 1]) << p;
      EXPECT_NEAR(got[p].logprob, want[p], 1e-4) << "prompt token " << p + 1;
      EXPECT_EQ(static_cast<int64_t>(got[p].top.size()), k);
      if (k > 0) {
        EXPECT_GE(got[p].top[0].second, got[p].logprob - 1e-9);  // the most likely first
        EXPECT_EQ(got[p].rank == 1, got[p].top[0].first == got[p].token);
      }
    }
    for (size_t i = 1; i < outs.size(); ++i) EXPECT_TRUE(outs[i].prompt_logprobs.empty());
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> prompt_;
};

TEST_F(PromptLogprobsTest, EqualTheForwardOfTheWholeSequenceWithoutPrefixCaching) {
  Engine e(*model_, tokenizer_.get(), Config(false));
  ExpectMatchesReference(Run(e, Spec(2)), 2);
}

TEST_F(PromptLogprobsTest, CachedPrefixIsRecomputedNotSkipped) {
  Engine e(*model_, tokenizer_.get(), Config(true));
  const std::vector<RequestOutput> warm = Run(e, Spec(-1));  // fills the prefix cache
  ASSERT_FALSE(warm.empty());
  EXPECT_TRUE(warm[0].prompt_logprobs.empty());
  const std::vector<RequestOutput> hit = Run(e, Spec(-1));
  EXPECT_GE(hit.back().num_cached_tokens, 32);  // the cache does serve this prompt
  const std::vector<RequestOutput> outs = Run(e, Spec(1));
  EXPECT_EQ(outs.back().num_cached_tokens, 0);
  ExpectMatchesReference(outs, 1);
  // The same tokens as the cached runs: recomputing changed nothing but the work done.
  EXPECT_EQ(outs[0].new_token_ids, hit[0].new_token_ids);
}

TEST_F(PromptLogprobsTest, ChunkedPrefillGivesTheSameValues) {
  Engine e(*model_, tokenizer_.get(), Config(true, /*budget=*/7));
  ExpectMatchesReference(Run(e, Spec(0)), 0);
}

TEST_F(PromptLogprobsTest, ForkedSamplesEachGetThePromptLogprobs) {
  Engine e(*model_, tokenizer_.get(), Config(true));
  RequestSpec s = Spec(0);
  s.n = 2;
  s.sampling.temperature = 1.0;
  s.sampling.seed = 7;
  const int64_t id = e.AddRequest(std::move(s));
  std::map<int64_t, size_t> sizes;
  while (e.HasUnfinished()) {
    for (RequestOutput& o : e.Step()) {
      if (!o.prompt_logprobs.empty()) {
        EXPECT_EQ(sizes.count(o.request_id), 0u) << "prompt logprobs sent twice";
        sizes[o.request_id] = o.prompt_logprobs.size();
      }
    }
  }
  EXPECT_EQ(sizes, (std::map<int64_t, size_t>{{id, prompt_.size() - 1}, {id + 1, prompt_.size() - 1}}));
}

TEST_F(PromptLogprobsTest, OutOfRangeTopIsRejected) {
  Engine e(*model_, tokenizer_.get(), Config(true));
  EXPECT_THROW(e.AddRequest(Spec(21)), Error);
}

// The first generated piece is decoded in the prompt's context: " a", not "a".
TEST_F(PromptLogprobsTest, GeneratedTextContinuesThePromptText) {
  Engine e(*model_, tokenizer_.get(), Config(true));
  RequestSpec s = Spec(-1);
  s.max_tokens = 12;
  std::string text;
  std::vector<int32_t> ids;
  for (const RequestOutput& o : Run(e, std::move(s))) {
    text += o.new_text;
    ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  }
  std::vector<int32_t> all = prompt_;
  all.insert(all.end(), ids.begin(), ids.end());
  EXPECT_EQ(tokenizer_->Decode(prompt_) + text, tokenizer_->Decode(all));
}

}  // namespace
}  // namespace pagoda
