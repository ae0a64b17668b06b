// Generation: the JSON a client sees for tool calls (streamed as OpenAI streams them, and
// whole), for echo with logprobs and for vLLM's prompt_logprobs, built from engine outputs.
#include "server/generation.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

ChoiceOutput Out(const std::string& text, bool finished = false) {
  ChoiceOutput o;
  o.output.new_text = text;
  o.output.new_token_ids = {1};
  o.output.finished = finished;
  o.output.finish_reason = finished ? FinishReason::kStop : FinishReason::kNone;
  return o;
}

struct ChatFixture {
  std::unique_ptr<ToolCallFormat> format = MakeToolCallFormat("hermes");
  Generation g;
  ChatFixture() {
    g.chat = true;
    g.id = "chatcmpl-1";
    g.model = "m";
    g.prompt_lens = {5};
    g.first_prompt_ids = {1};
    g.tool_format = format.get();
    g.Init(1);
  }
};

const std::vector<std::string> kAnswer = {
    "Let me look.", "\n<tool_call>\n{\"name\": \"get_weather\", ",
    "\"arguments\": {\"city\": \"Paris\"}}",
    "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"};

TEST(GenerationTest, StreamsToolCallsAsOpenAiDoes) {
  ChatFixture f;
  std::vector<ordered_json> deltas;
  ordered_json last;
  for (size_t i = 0; i < kAnswer.size(); ++i) {
    for (ordered_json& c : f.g.Chunks(Out(kAnswer[i], i + 1 == kAnswer.size()))) {
      EXPECT_EQ(c["object"], "chat.completion.chunk");
      deltas.push_back(c["choices"][0]["delta"]);
      last = c;
    }
  }
  // role + content first, then per call: id, type and name with empty arguments, then arguments.
  ASSERT_GE(deltas.size(), 5u);
  EXPECT_EQ(deltas[0]["role"], "assistant");
  EXPECT_EQ(deltas[0]["content"], "Let me look.");
  std::string content;
  std::vector<ordered_json> calls;
  for (const ordered_json& d : deltas) {
    if (d.contains("content") && d["content"].is_string())
      content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    ASSERT_EQ(d["tool_calls"].size(), 1u);
    const ordered_json& tc = d["tool_calls"][0];
    const int64_t index = tc["index"];
    if (tc.contains("id")) {
      EXPECT_EQ(index, static_cast<int64_t>(calls.size()));
      EXPECT_EQ(tc["type"], "function");
      EXPECT_EQ(tc["function"]["arguments"], "");
      calls.push_back(tc);
    } else {
      ASSERT_EQ(index + 1, static_cast<int64_t>(calls.size()));  // arguments follow their name
      calls[index]["function"]["arguments"] =
          calls[index]["function"]["arguments"].get<std::string>() +
          tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Let me look.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(ordered_json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            (ordered_json{{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "tool_calls");

  // The whole response from the same outputs: the same content and calls.
  ordered_json r = f.g.Response();
  const ordered_json& msg = r["choices"][0]["message"];
  EXPECT_EQ(msg["content"], "Let me look.\n");
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST(GenerationTest, WholeToolCallAnswerHasNullContent) {
  ChatFixture f;
  f.g.Apply(Out("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", true));
  ordered_json r = f.g.Response();
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
}

TEST(GenerationTest, UnparsableAnswerIsPlainTextWithItsFinishReason) {
  ChatFixture f;
  std::string streamed;
  ordered_json last;
  for (const char* piece : {"<tool_call>\n{\"name\": ", "get_weather}\n</tool_call>"}) {
    for (ordered_json& c :
         f.g.Chunks(Out(piece, std::string(piece).find("</tool_call>") != std::string::npos))) {
      const ordered_json& d = c["choices"][0]["delta"];
      EXPECT_FALSE(d.contains("tool_calls"));
      if (d.contains("content") && d["content"].is_string())
        streamed += d["content"].get<std::string>();
      last = c;
    }
  }
  const std::string text = "<tool_call>\n{\"name\": get_weather}\n</tool_call>";
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  ordered_json r = f.g.Response();
  EXPECT_EQ(r["choices"][0]["message"]["content"], text);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(GenerationTest, WithoutToolFormatTheMarkersAreText) {
  Generation g;
  g.chat = true;
  g.prompt_lens = {3};
  g.Init(1);
  const std::string text = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  g.Apply(Out(text, true));
  EXPECT_EQ(g.Response()["choices"][0]["message"]["content"], text);
}

TEST(GenerationTest, EchoStreamPutsThePromptLogprobsInTheFirstChunk) {
  Generation g;
  g.echo = true;
  g.want_logprobs = true;
  g.want_prompt_logprobs = true;
  g.prompt_texts = {"ab"};
  g.first_prompt_ids = {3};
  g.prompt_lens = {2};
  g.Init(1);
  ChoiceOutput first = Out("c");
  TokenLogprobs p, t1, t2;
  p.token = 4;
  p.logprob = -1.0;
  t1.token = 1;
  t1.logprob = -0.5;
  t2.token = 1;
  t2.logprob = -0.25;
  first.output.prompt_logprobs = {p};
  first.output.new_logprobs = {t1};
  std::vector<ordered_json> a = g.Chunks(first);
  ASSERT_EQ(a.size(), 1u);
  const ordered_json& c0 = a[0]["choices"][0];
  EXPECT_EQ(c0["text"], "abc");
  EXPECT_EQ(c0["logprobs"]["token_logprobs"], (ordered_json{nullptr, -1.0, -0.5}));
  EXPECT_EQ(c0["prompt_logprobs"].size(), 2u);
  ChoiceOutput second = Out("d", true);
  second.output.new_logprobs = {t2};
  std::vector<ordered_json> b = g.Chunks(second);
  ASSERT_EQ(b.size(), 1u);
  const ordered_json& c1 = b[0]["choices"][0];
  EXPECT_EQ(c1["text"], "d");
  EXPECT_EQ(c1["logprobs"]["token_logprobs"], (ordered_json{-0.25}));
  // Offsets continue over the token texts of the first chunk ("token_id:3" ... 10 bytes each).
  EXPECT_EQ(c1["logprobs"]["text_offset"], (ordered_json{30}));
  EXPECT_FALSE(c1.contains("prompt_logprobs"));
  // The whole response: the same entries in one list.
  ordered_json r = g.Response();
  EXPECT_EQ(r["choices"][0]["text"], "abcd");
  EXPECT_EQ(r["choices"][0]["logprobs"]["token_logprobs"],
            (ordered_json{nullptr, -1.0, -0.5, -0.25}));
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], (ordered_json{0, 10, 20, 30}));
}

}  // namespace
}  // namespace pagoda
