#include "server/openai_api.h"

#include <gtest/gtest.h>

#include "io/gguf_file.h"
#include "tokenizer/tokenizer_test_util.h"

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

// OpenAI and vLLM answer an unknown model with 404 NotFoundError, code model_not_found.
TEST(OpenAiApiTest, UnknownModelIs404ModelNotFound) {
  for (const char* body : {R"({"model": "x", "prompt": [1]})", R"({"model": "x", "messages": [{"role": "user"}]})"}) {
    try {
      if (std::string(body).find("messages") != std::string::npos) {
        ParseChatRequest(Body(body), Ctx());
      } else {
        ParseCompletionRequest(Body(body), Ctx());
      }
      ADD_FAILURE() << "no error for " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 404);
      EXPECT_EQ(e.param(), "model");
      EXPECT_EQ(e.code(), "model_not_found");
      EXPECT_NE(std::string(e.what()).find("`x`"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("\"x\""), std::string::npos) << e.what();
      const ordered_json j = ErrorBody(e.status(), e.what(), e.param(), e.code());
      EXPECT_EQ(j["error"]["type"], "NotFoundError");
      EXPECT_EQ(j["error"]["code"], "model_not_found");
    }
  }
  EXPECT_NO_THROW(CheckModel(Body(R"({"model": "m"})"), Ctx()));
  EXPECT_NO_THROW(CheckModel(Body(R"({"model": null})"), Ctx()));
  EXPECT_EQ(ErrorOf([] { CheckModel(Body(R"({"model": 3})"), Ctx()); }).first, 400);
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

TEST(OpenAiApiTest, EchoWithLogprobsAsksForPromptLogprobs) {
  CompletionRequest r = ParseCompletionRequest(Body(R"({"prompt": [1, 2, 3], "echo": true, "logprobs": 2})"), Ctx());
  EXPECT_EQ(r.base.prompt_logprobs, 2);
  EXPECT_EQ(r.prompt_logprobs, -1);  // no vLLM prompt_logprobs field in the response
  CompletionRequest e = ParseCompletionRequest(Body(R"({"prompt": [1, 2], "echo": true})"), Ctx());
  EXPECT_EQ(e.base.prompt_logprobs, -1);  // echo alone needs no logits
  CompletionRequest v = ParseCompletionRequest(Body(R"({"prompt": [1, 2], "prompt_logprobs": 0})"), Ctx());
  EXPECT_EQ(v.base.prompt_logprobs, 0);
  EXPECT_EQ(v.prompt_logprobs, 0);
  EXPECT_EQ(ErrorOf([] { ParseCompletionRequest(Body(R"({"prompt": [1], "prompt_logprobs": 21})"), Ctx()); }).second,
            "prompt_logprobs");
  EXPECT_EQ(ErrorOf([] { ParseCompletionRequest(Body(R"({"prompt": [1], "prompt_logprobs": "a"})"), Ctx()); }).second,
            "prompt_logprobs");
}

TEST(OpenAiApiTest, EchoLogprobsStartWithTheNullFirstPromptToken) {
  TokenLogprobs p1, p2, out;
  p1.token = 7;
  p1.logprob = -1.0;
  p1.top = {{8, -0.5}};
  p2.token = 9;
  p2.logprob = -2.0;
  p2.top = {{9, -2.0}};
  out.token = 4;
  out.logprob = -0.25;
  out.top = {{4, -0.25}};
  ordered_json j = EchoCompletionLogprobs(nullptr, 3, {p1, p2}, {out});
  EXPECT_EQ(j["tokens"], (ordered_json{"token_id:3", "token_id:7", "token_id:9", "token_id:4"}));
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["token_logprobs"][1], -1.0);
  EXPECT_EQ(j["token_logprobs"][3], -0.25);
  EXPECT_EQ(j["text_offset"], (ordered_json{0, 10, 20, 30}));
  EXPECT_EQ(j["top_logprobs"][1]["token_id:8"], -0.5);
}

TEST(OpenAiApiTest, VllmPromptLogprobsShape) {
  TokenLogprobs p;
  p.token = 7;
  p.logprob = -1.0;
  p.rank = 2;
  p.top = {{8, -0.5}, {7, -1.0}};
  ordered_json j = PromptLogprobsJson(nullptr, {p});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0].is_null());
  EXPECT_EQ(j[1]["7"]["logprob"], -1.0);
  EXPECT_EQ(j[1]["7"]["rank"], 2);
  EXPECT_EQ(j[1]["8"]["rank"], 1);
  EXPECT_EQ(j[1]["7"]["decoded_token"], "token_id:7");
  EXPECT_EQ(j[1].size(), 2u);
}

ApiContext WithParser() {
  ApiContext c = Ctx();
  c.has_tool_parser = true;
  return c;
}

constexpr const char* kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";

ChatRequest Chat(const std::string& extra, const ApiContext& ctx) {
  return ParseChatRequest(Body((R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}").c_str()), ctx);
}

TEST(OpenAiApiTest, ToolChoiceModes) {
  EXPECT_EQ(Chat(kTools, WithParser()).tool_choice, ToolChoice::kAuto);  // default with a parser
  EXPECT_EQ(Chat(kTools, Ctx()).tool_choice, ToolChoice::kNone);         // and without one
  EXPECT_EQ(Chat(std::string(kTools) + R"(, "tool_choice": "none")", WithParser()).tool_choice, ToolChoice::kNone);
  EXPECT_EQ(Chat(std::string(kTools) + R"(, "tool_choice": "required")", WithParser()).tool_choice,
            ToolChoice::kRequired);
  ChatRequest named = Chat(
      std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})", WithParser());
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tool_choice_name, "get_weather");
  EXPECT_FALSE(named.base.skip_special_tokens);  // the parsers look for special markers
  EXPECT_TRUE(Chat(kTools, Ctx()).base.skip_special_tokens);
  EXPECT_EQ(named.tools.size(), 1u);
}

TEST(OpenAiApiTest, BadToolChoiceIs400) {
  const std::vector<std::pair<std::string, ApiContext>> bad = {
      {std::string(kTools) + R"(, "tool_choice": "auto")", Ctx()},  // no --tool-call-parser
      {std::string(kTools) + R"(, "tool_choice": "sometimes")", WithParser()},
      {std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "other"}})", WithParser()},
      {std::string(kTools) + R"(, "tool_choice": 3)", WithParser()},
      {R"("tool_choice": "required")", WithParser()},  // no tools
      {R"("tools": [{"type": "function"}])", WithParser()},
      {R"("tools": {"name": "x"})", WithParser()},
  };
  for (const auto& [extra, ctx] : bad) {
    const auto [status, param] = ErrorOf([&] { Chat(extra, ctx); });
    EXPECT_EQ(status, 400) << extra;
    EXPECT_TRUE(param == "tool_choice" || param == "tools") << extra << ": " << param;
  }
}

// Logprob tokens read as they do inside the text: SentencePiece's "▁a" is " a" even though
// a decode of that token alone drops the space.
TEST(OpenAiApiTest, TokenTextKeepsTheSentencePieceSpace) {
  GgufFile gguf(testing::TokFixture("models/stories260K/stories260K.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  EncodeOptions o;
  o.add_special_tokens = false;
  const std::vector<int32_t> ids = tok->Encode("Once upon a time there was a little girl", o);
  std::string joined;
  for (int32_t id : ids) joined += TokenText(tok.get(), id);
  EXPECT_EQ(joined, " Once upon a time there was a little girl");
  EXPECT_EQ(tok->Decode(ids), "Once upon a time there was a little girl");
  EXPECT_EQ(TokenText(nullptr, 5), "token_id:5");
}

}  // namespace
}  // namespace pagoda
