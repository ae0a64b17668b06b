// AsyncEngine on a real model (stories260K): streams, synchronous validation errors,
// the waiting-queue limit, aborts that free blocks.
#include "server/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "model/model.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::string Fixture(const std::string& rel) {
  const char* env = std::getenv("PAGODA_FIXTURES");
  return (env != nullptr ? std::string(env)
                         : std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures") +
         "/" + rel;
}

class AsyncEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(Fixture("models/stories260K/stories260K.bin"));
    tokenizer_ =
        LoadTokenizerForModel(Fixture("models/stories260K/stories260K.bin"),
                              Fixture("models/stories260K/tok512.bin"), model_->spec().vocab_size);
  }
  EngineConfig Config(int64_t num_blocks = 64, int64_t max_num_seqs = 8) {
    EngineConfig c;
    c.kv.num_blocks = num_blocks;
    c.kv.block_size = 16;
    c.kv.dtype = KVCacheDType::kF32;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = 512;
    c.scheduler.max_num_seqs = max_num_seqs;
    return c;
  }
  static RequestSpec Greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
    RequestSpec s;
    s.prompt = std::move(prompt);
    s.sampling.temperature = 0;
    s.max_tokens = max_tokens;
    s.ignore_eos = true;
    return s;
  }
  static std::vector<std::vector<int32_t>> Tokens(RequestStream& stream) {
    std::vector<std::vector<int32_t>> out(stream.num_choices());
    for (const ChoiceOutput& o : stream.WaitAll()) {
      out[o.choice].insert(out[o.choice].end(), o.output.new_token_ids.begin(),
                           o.output.new_token_ids.end());
    }
    return out;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(AsyncEngineTest, StreamsMatchTheEngineRunAlone) {
  std::vector<int32_t> alone;
  {
    Engine engine(*model_, tokenizer_.get(), Config());
    AsyncEngine async(engine, nullptr, AsyncEngineOptions{});
    alone = Tokens(*async.Submit({Greedy({1, 400, 50}, 20)}, "a"))[0];
  }
  ASSERT_EQ(alone.size(), 20u);
  Engine engine(*model_, tokenizer_.get(), Config());
  ServerMetrics metrics("m");
  AsyncEngine async(engine, &metrics, AsyncEngineOptions{});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::thread> threads;
  std::mutex mu;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      auto s = async.Submit({Greedy({1, 400, 50}, 20)}, "r");
      std::lock_guard<std::mutex> lock(mu);
      streams.push_back(s);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : streams) EXPECT_EQ(Tokens(*s)[0], alone);
  EXPECT_EQ(async.NumUnfinished(), 0);
  EXPECT_NE(metrics.Render(async.Stats())
                .find("pagoda_e2e_request_latency_seconds_count{model_name=\"m\"} 6"),
            std::string::npos);
}

TEST_F(AsyncEngineTest, BadRequestThrowsToItsSubmitterOnly) {
  Engine engine(*model_, tokenizer_.get(), Config());
  AsyncEngine async(engine, nullptr, AsyncEngineOptions{});
  auto good = async.Submit({Greedy({1, 2, 3}, 30)}, "good");
  EXPECT_THROW(async.Submit({Greedy({1, 99999}, 5)}, "bad-id"), Error);
  EXPECT_THROW(async.Submit({Greedy({1, 2}, 1000)}, "too-long"), Error);
  // One bad prompt among several: nothing of the request is queued.
  EXPECT_THROW(async.Submit({Greedy({1, 2}, 5), Greedy({}, 5)}, "mixed"), Error);
  EXPECT_EQ(Tokens(*good)[0].size(), 30u);
  EXPECT_EQ(async.NumUnfinished(), 0);
}

// The CPU backend, whose MatMul throws once `fail` is set (a device error mid-step).
class FailingBackend : public CpuBackend {
 public:
  std::atomic<bool> fail{false};
  void MatMul(const Weight& w, const TensorView& x, const TensorView& y, const Epilogue& ep) override {
    if (fail) ThrowError(ErrorCode::kInternal, "injected device error");
    CpuBackend::MatMul(w, x, y, ep);
  }
};

// A step that throws ends the requests in flight (aborted), not the process: later requests
// are refused with the reason, and Failure() reports it.
TEST_F(AsyncEngineTest, AFailedStepAbortsTheRequestsInFlightAndRefusesNewOnes) {
  FailingBackend backend;
  LoadOptions options;
  options.backend = &backend;
  auto model = LoadModel(Fixture("models/stories260K/stories260K.bin"), options);
  Engine engine(*model, tokenizer_.get(), Config());
  AsyncEngine async(engine, nullptr, AsyncEngineOptions{});
  auto a = async.Submit({Greedy({1, 2, 3}, 200)}, "a");
  auto b = async.Submit({Greedy({1, 5}, 200)}, "b");
  std::vector<ChoiceOutput> first;
  while (first.empty() && a->Wait(&first, std::chrono::milliseconds(100))) {
  }
  ASSERT_FALSE(first.empty()) << "request a produced nothing before the failure";
  backend.fail = true;
  for (auto* stream : {a.get(), b.get()}) {
    const std::vector<ChoiceOutput> rest = stream->WaitAll();
    ASSERT_FALSE(rest.empty());
    EXPECT_EQ(rest.back().output.finish_reason, FinishReason::kAbort);
  }
  EXPECT_NE(async.Failure().find("injected device error"), std::string::npos) << async.Failure();
  EXPECT_EQ(async.NumUnfinished(), 0);
  try {
    async.Submit({Greedy({1, 2}, 5)}, "after");
    ADD_FAILURE() << "a request was accepted after the engine failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("restarted"), std::string::npos) << e.what();
  }
}

TEST_F(AsyncEngineTest, SeveralPromptsAndSamplesAreNumberedPromptMajor) {
  Engine engine(*model_, tokenizer_.get(), Config());
  AsyncEngine async(engine, nullptr, AsyncEngineOptions{});
  RequestSpec a = Greedy({1, 10}, 4), b = Greedy({1, 20, 30}, 6);
  a.n = b.n = 2;
  auto s = async.Submit({a, b}, "multi");
  auto tokens = Tokens(*s);
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0].size(), 4u);
  EXPECT_EQ(tokens[1], tokens[0]);  // greedy samples agree
  EXPECT_EQ(tokens[2].size(), 6u);
  EXPECT_EQ(tokens[3], tokens[2]);
}

TEST_F(AsyncEngineTest, AbortFreesBlocksAndFinishesTheStream) {
  Engine engine(*model_, tokenizer_.get(), Config());
  AsyncEngine async(engine, nullptr, AsyncEngineOptions{});
  auto s = async.Submit({Greedy({1, 5, 6, 7}, 250)}, "long");
  std::vector<ChoiceOutput> first;
  while (first.empty()) s->Wait(&first, std::chrono::milliseconds(100));
  async.Abort(s);
  std::vector<ChoiceOutput> rest = s->WaitAll();
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().output.finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(s->finished());
  // Later work still runs; afterwards nothing holds blocks.
  EXPECT_EQ(Tokens(*async.Submit({Greedy({1, 2}, 3)}, "after"))[0].size(), 3u);
  EXPECT_EQ(async.Stats().num_running, 0);
  EXPECT_EQ(async.Stats().kv_usage, 0.0);
}

TEST_F(AsyncEngineTest, FullWaitingQueueIsResourceExhausted) {
  Engine engine(*model_, tokenizer_.get(), Config(64, /*max_num_seqs=*/1));
  AsyncEngineOptions o;
  o.max_queue = 2;
  AsyncEngine async(engine, nullptr, o);
  // Three prompts in one request would wait beyond the limit at once.
  try {
    async.Submit({Greedy({1, 2}, 5), Greedy({1, 3}, 5), Greedy({1, 4}, 5)}, "three");
    FAIL() << "expected kResourceExhausted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  EXPECT_EQ(Tokens(*async.Submit({Greedy({1, 2}, 5), Greedy({1, 3}, 5)}, "two")).size(), 2u);
}

}  // namespace
}  // namespace pagoda
