#include "server/openai_api.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

ApiContext Ctx() {
  ApiContext c;
  c.served_model_name = "m";
  c.max_model_len = 64;
  c.vocab_size = 100;
  return c;
}

ordered_json Body(const char* text) { return ParseJsonBody(text); }

// The status and param of the ApiError `fn` throws.
template <typename Fn>
std::pair<int, std::string> ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}

TEST(OpenAiApiTest, ParsesTokenIdPromptAndSamplingFields) {
  CompletionRequest r = ParseCompletionRequest(
      Body(R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0, "top_p": 0.5,
               "top_k": 4, "min_p": 0.1, "seed": 7, "n": 2, "stop_token_ids": [7], "ignore_eos": true, "min_tokens": 2,
               "logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
               "cache_salt": "t", "unknown_field": {"ignored": 1}})"),
      Ctx());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(r.base.sampling.temperature, 0.0);
  EXPECT_EQ(r.base.sampling.top_k, 4);
  EXPECT_EQ(*r.base.sampling.seed, 7u);
  EXPECT_EQ(r.base.sampling.logprobs, 3);
  EXPECT_EQ(r.base.n, 2);
  EXPECT_EQ(r.base.stop_token_ids, (std::vector<int32_t>{7}));
  EXPECT_TRUE(r.base.ignore_eos);
  EXPECT_EQ(r.base.min_tokens, 2);
  EXPECT_EQ(r.base.cache_salt, "t");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiApiTest, ParsesListsOfTokenIdLists) {
  CompletionRequest r = ParseCompletionRequest(Body(R"({"prompt": [[1, 2], [3]]})"), Ctx());
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1], (std::vector<int32_t>{3}));
  EXPECT_EQ(r.model, "m");
}

TEST(OpenAiApiTest, WrongTypesAre400NamingTheField) {
  const char* cases[][2] = {
      {R"({"prompt": [1], "temperature": "hot"})", "temperature"},
      {R"({"prompt": [1], "max_tokens": "10"})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": [1], "stream": "yes"})", "stream"},
      {R"({"prompt": [1], "n": [2]})", "n"},
      {R"({"prompt": [1], "stop": 5})", "stop"},
      {R"({"prompt": [1], "stop": ["a", 1]})", "stop"},
      {R"({"prompt": {"a": 1}})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [1], "seed": "s"})", "seed"},
      {R"({"prompt": [1], "logprobs": true})", "logprobs"},
      {R"({"prompt": [1], "stream_options": 3})", "stream_options"},
      {R"({"prompt": [1], "model": 3})", "model"},
      {R"({"prompt": [1], "ignore_eos": 1})", "ignore_eos"},
  };
  for (const auto& c : cases) {
    auto [status, param] = ErrorOf([&] { ParseCompletionRequest(Body(c[0]), Ctx()); });
    EXPECT_EQ(status, 400) << c[0];
    EXPECT_EQ(param, c[1]) << c[0];
  }
}

TEST(OpenAiApiTest, OutOfRangeValuesAre400) {
  const char* cases[][2] = {
      {R"({"prompt": [1], "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 65})", "max_tokens"},
      {R"({"prompt": [1], "temperature": -0.5})", "temperature"},
      {R"({"prompt": [1], "top_p": 0})", "top_p"},
      {R"({"prompt": [1], "n": 0})", "n"},
      {R"({"prompt": [100]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": "text"})", "prompt"},  // no tokenizer
      {R"({})", "prompt"},
      {R"({"prompt": [1], "stop": "x"})", "stop"},  // stop strings need a tokenizer
  };
  for (const auto& c : cases) {
    auto [status, param] = ErrorOf([&] { ParseCompletionRequest(Body(c[0]), Ctx()); });
    EXPECT_EQ(status, 400) << c[0];
    EXPECT_EQ(param, c[1]) << c[0];
  }
}

TEST(OpenAiApiTest, UnknownModelIs400) {
  auto [status, param] =
      ErrorOf([&] { ParseCompletionRequest(Body(R"({"model": "x", "prompt": [1]})"), Ctx()); });
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param, "model");
}

TEST(OpenAiApiTest, MalformedJsonIs400) {
  EXPECT_EQ(ErrorOf([] { ParseJsonBody("{\"prompt\": "); }).first, 400);
  EXPECT_EQ(ErrorOf([] { ParseJsonBody("[1, 2]"); }).first, 400);
}

TEST(OpenAiApiTest, DefaultMaxTokensFillsTheContext) {
  CompletionRequest r = ParseCompletionRequest(Body(R"({"prompt": [1, 2, 3, 4]})"), Ctx());
  std::vector<RequestSpec> specs = MakeSpecs(r.prompts, r, Ctx());
  EXPECT_EQ(specs[0].max_tokens, 60);
}

TEST(OpenAiApiTest, PromptPlusMaxTokensBeyondTheContextIs400) {
  CompletionRequest r =
      ParseCompletionRequest(Body(R"({"prompt": [1, 2, 3, 4], "max_tokens": 61})"), Ctx());
  EXPECT_EQ(ErrorOf([&] { MakeSpecs(r.prompts, r, Ctx()); }).first, 400);
  std::vector<int32_t> long_prompt(64, 1);
  CompletionRequest r2;
  r2.prompts = {long_prompt};
  EXPECT_EQ(ErrorOf([&] { MakeSpecs(r2.prompts, r2, Ctx()); }),
            (std::pair<int, std::string>{400, "prompt"}));
}

TEST(OpenAiApiTest, ChatFieldsAndMessages) {
  ChatRequest r = ParseChatRequest(
      Body(
          R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
               "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 3})"),
      Ctx());
  EXPECT_EQ(r.messages[0]["content"], "a\nb");
  EXPECT_EQ(r.base.sampling.logprobs, 2);
  EXPECT_EQ(*r.max_tokens, 3);
  EXPECT_EQ(ErrorOf([] { ParseChatRequest(Body(R"({"messages": "hi"})"), Ctx()); }).second,
            "messages");
  EXPECT_EQ(ErrorOf([] { ParseChatRequest(Body(R"({"messages": []})"), Ctx()); }).second,
            "messages");
  EXPECT_EQ(
      ErrorOf([] { ParseChatRequest(Body(R"({"messages": [{"content": "x"}]})"), Ctx()); }).second,
      "messages");
  EXPECT_EQ(ErrorOf([] {
              ParseChatRequest(Body(R"({"messages": [{"role": "user"}], "logprobs": 1})"), Ctx());
            }).second,
            "logprobs");
}

TEST(OpenAiApiTest, ErrorBodyHasOpenAiShape) {
  ordered_json e = ErrorBody(400, "bad", "n");
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "BadRequestError");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["code"], 400);
  EXPECT_TRUE(ErrorBody(503, "busy")["error"]["param"].is_null());
}

TEST(OpenAiApiTest, SseFraming) {
  EXPECT_EQ(SseEvent(ordered_json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 (half a character) is replaced, never thrown on.
  const std::string event = SseEvent(ordered_json{{"text", std::string("\xe2\x82")}});
  EXPECT_EQ(event.rfind("data: ", 0), 0u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
}

TEST(OpenAiApiTest, UsageAndFinishReason) {
  ordered_json u = Usage(3, 4);
  EXPECT_EQ(u["prompt_tokens"], 3);
  EXPECT_EQ(u["completion_tokens"], 4);
  EXPECT_EQ(u["total_tokens"], 7);
  EXPECT_TRUE(FinishReasonJson(FinishReason::kNone).is_null());
  EXPECT_EQ(FinishReasonJson(FinishReason::kLength), "length");
}

TEST(OpenAiApiTest, CompletionLogprobsShape) {
  TokenLogprobs lp;
  lp.token = 5;
  lp.logprob = -0.5;
  lp.top = {{5, -0.5}, {6, -1.5}};
  ordered_json j = CompletionLogprobs(nullptr, {lp, lp}, 0);
  EXPECT_EQ(j["tokens"].size(), 2u);
  EXPECT_EQ(j["token_logprobs"][0], -0.5);
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["text_offset"][1], static_cast<int64_t>(std::string("token_id:5").size()));
  ordered_json c = ChatLogprobs(nullptr, {lp});
  EXPECT_EQ(c["content"][0]["top_logprobs"].size(), 2u);
}

}  // namespace
}  // namespace pagoda
