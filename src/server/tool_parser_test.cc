// Tool-call parsers on answers recorded from each chat template's model family (written
// the way those models answer), whole and streamed in pieces of every size; bad input
// comes back as the model's text, never as an error.
#include "server/tool_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace pagoda {
namespace {

struct Expected {
  std::string name;
  nlohmann::json arguments;
};

// Whole answer and the same answer fed in pieces of `piece` bytes give the same result.
ParsedToolCalls Streamed(const ToolCallFormat& f, const std::string& text, size_t piece) {
  ToolCallStream s(f);
  ParsedToolCalls out;
  int64_t next_index = 0;
  auto take = [&](ToolCallDelta d) {
    out.content += d.content;
    if (!d.calls.empty()) EXPECT_EQ(d.first_index, next_index);
    next_index += static_cast<int64_t>(d.calls.size());
    for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += piece) take(s.Add(text.substr(i, piece)));
  take(s.Finish());
  return out;
}

void ExpectParses(const char* format, const std::string& text, const std::string& content,
                  const std::vector<Expected>& calls) {
  auto f = MakeToolCallFormat(format);
  ASSERT_NE(f, nullptr) << format;
  for (size_t piece : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}}) {
    const ParsedToolCalls got = piece == 0 ? ParseToolCalls(*f, text) : Streamed(*f, text, piece);
    SCOPED_TRACE(std::string(format) + " piece " + std::to_string(piece));
    EXPECT_EQ(got.content, content);
    ASSERT_EQ(got.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, calls[i].name);
      EXPECT_EQ(nlohmann::json::parse(got.calls[i].arguments), calls[i].arguments);
      EXPECT_FALSE(got.calls[i].id.empty());
    }
  }
}

// Text that does not parse comes back unchanged, whole and streamed.
void ExpectUnchanged(const char* format, const std::string& text) {
  ExpectParses(format, text, text, {});
}

const nlohmann::json kParis = {{"location", "Paris, France"}, {"unit", "celsius"}};
const nlohmann::json kTokyo = {{"location", "Tokyo"}, {"unit", "celsius"}};

// ---- hermes (Qwen2.5-7B-Instruct's template) ----

TEST(ToolParserTest, HermesOneCall) {
  ExpectParses("hermes",
               "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "
               "\"Paris, France\", \"unit\": \"celsius\"}}\n</tool_call>",
               "", {{"get_current_weather", kParis}});
}

TEST(ToolParserTest, HermesContentThenTwoCalls) {
  ExpectParses(
      "hermes",
      "Let me check both cities.\n<tool_call>\n{\"name\": \"get_current_weather\", "
      "\"arguments\": {\"location\": \"Paris, France\", \"unit\": \"celsius\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "
      "\"Tokyo\", \"unit\": \"celsius\"}}\n</tool_call>",
      "Let me check both cities.\n",
      {{"get_current_weather", kParis}, {"get_current_weather", kTokyo}});
}

TEST(ToolParserTest, HermesWithoutClosingTagAtTheEnd) {
  ExpectParses("hermes", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n", "",
               {{"now", nlohmann::json::object()}});
}

TEST(ToolParserTest, HermesBracesInsideStrings) {
  ExpectParses("hermes",
               "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"if (x) { "
               "y(\\\"}\\\"); }\"}}\n</tool_call>",
               "", {{"run", {{"code", "if (x) { y(\"}\"); }"}}}});
}

TEST(ToolParserTest, HermesBadInputIsText) {
  ExpectUnchanged("hermes", "The weather in Paris is sunny.");
  ExpectUnchanged("hermes",
                  "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "
                  "\n</tool_call>");
  ExpectUnchanged("hermes", "<tool_call>\n{\"arguments\": {}}\n</tool_call>");  // no name
  ExpectUnchanged("hermes", "<tool_call>\nget_current_weather(Paris)\n</tool_call>");
  ExpectUnchanged("hermes", "<tool_call>");
  ExpectUnchanged("hermes", "a < b and <tool_ca");  // a marker that never completes
  ExpectUnchanged("hermes", "");
}

TEST(ToolParserTest, HermesTextAfterTheCallsIsContent) {
  ExpectParses("hermes", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\nDone.",
               "\nDone.", {{"now", nlohmann::json::object()}});
}

// ---- llama3_json (Llama 3.1 / 3.2 templates) ----

TEST(ToolParserTest, Llama3JsonParameters) {
  ExpectParses(
      "llama3_json",
      "{\"name\": \"get_current_weather\", \"parameters\": {\"location\": \"Paris, France\", "
      "\"unit\": \"celsius\"}}",
      "", {{"get_current_weather", kParis}});
}

TEST(ToolParserTest, Llama3JsonPythonTagAndSeveralCalls) {
  ExpectParses("llama3_json",
               "<|python_tag|>{\"name\": \"get_current_weather\", \"parameters\": {\"location\": "
               "\"Paris, France\", \"unit\": \"celsius\"}}; {\"name\": \"get_current_weather\", "
               "\"arguments\": {\"location\": \"Tokyo\", \"unit\": \"celsius\"}}",
               "", {{"get_current_weather", kParis}, {"get_current_weather", kTokyo}});
}

TEST(ToolParserTest, Llama3JsonLeadingWhitespace) {
  ExpectParses("llama3_json", "\n\n{\"name\": \"now\", \"parameters\": {}}", "",
               {{"now", nlohmann::json::object()}});
}

TEST(ToolParserTest, Llama3JsonBadInputIsText) {
  ExpectUnchanged("llama3_json",
                  "I can't call tools for that. {\"name\": \"x\", \"parameters\": {}}");
  ExpectUnchanged("llama3_json", "{\"answer\": 42}");  // JSON, but not a call
  ExpectUnchanged("llama3_json",
                  "{\"name\": \"get_current_weather\", \"parameters\": {\"location\": \"Par");
  ExpectUnchanged("llama3_json", "{not json at all}");
  ExpectUnchanged("llama3_json", "   ");
}

// ---- mistral (Mistral-Nemo-Instruct-2407's template) ----

TEST(ToolParserTest, MistralArray) {
  auto f = MakeToolCallFormat("mistral");
  ExpectParses(
      "mistral",
      "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
      "France\", \"unit\": \"celsius\"}}, {\"name\": \"get_current_weather\", \"arguments\": "
      "{\"location\": \"Tokyo\", \"unit\": \"celsius\"}}]",
      "", {{"get_current_weather", kParis}, {"get_current_weather", kTokyo}});
  const ParsedToolCalls p =
      ParseToolCalls(*f, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // Mistral's templates check for 9 alphanumerics
}

TEST(ToolParserTest, MistralContentBeforeAndArgsForm) {
  ExpectParses(
      "mistral",
      "Sure.[TOOL_CALLS]get_current_weather[ARGS]{\"location\": \"Paris, France\", \"unit\": "
      "\"celsius\"}",
      "Sure.", {{"get_current_weather", kParis}});
}

TEST(ToolParserTest, MistralStringArguments) {
  ExpectParses("mistral",
               "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}]",
               "", {{"now", {{"tz", "UTC"}}}});
}

TEST(ToolParserTest, MistralBadInputIsText) {
  ExpectUnchanged("mistral",
                  "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\"");
  ExpectUnchanged("mistral", "[TOOL_CALLS][]");
  ExpectUnchanged("mistral", "[TOOL_CALLS][{\"arguments\": {}}]");
  ExpectUnchanged("mistral", "[TOOL_CALLS] I would call a tool here");
  ExpectUnchanged("mistral", "Just text with [brackets] and [TOOL_");
}

// ---- deepseek_v3 (DeepSeek-R1-Distill-Llama-8B's template) ----

TEST(ToolParserTest, DeepSeekV3TwoCalls) {
  ExpectParses(
      "deepseek_v3",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n"
      "```json\n{\"location\": \"Paris, France\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n{\"location\": "
      "\"Tokyo\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "", {{"get_current_weather", kParis}, {"get_current_weather", kTokyo}});
}

TEST(ToolParserTest, DeepSeekV3AfterThinking) {
  ExpectParses(
      "deepseek_v3",
      "I need the weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_current_weather\n```json\n{\"location\": \"Paris, France\", \"unit\": "
      "\"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "I need the weather.\n</think>\n\n", {{"get_current_weather", kParis}});
}

TEST(ToolParserTest, DeepSeekV31) {
  ExpectParses(
      "deepseek_v31",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>{\"location\": "
      "\"Paris, France\", \"unit\": \"celsius\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "", {{"get_current_weather", kParis}});
}

TEST(ToolParserTest, DeepSeekBadInputIsText) {
  ExpectUnchanged("deepseek_v3",
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"
                  "oops}\n```<｜tool▁call▁end｜>");
  ExpectUnchanged(
      "deepseek_v3",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}");
  ExpectUnchanged("deepseek_v3", "<｜tool▁calls▁begin｜>");
  ExpectUnchanged("deepseek_v3", "no tools today <｜tool▁ca");
}

TEST(ToolParserTest, UnknownNameIsNull) {
  EXPECT_EQ(MakeToolCallFormat("pythonic_v9"), nullptr);
  for (const char* n : {"hermes", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31"}) {
    auto f = MakeToolCallFormat(n);
    ASSERT_NE(f, nullptr);
    EXPECT_STREQ(f->name(), n);
  }
}

// Streaming: content before the marker goes out before the call is complete; a call goes
// out as soon as it is complete, not at the end.
TEST(ToolParserTest, StreamEmitsContentEarlyAndCallsWhenComplete) {
  auto f = MakeToolCallFormat("hermes");
  ToolCallStream s(*f);
  EXPECT_EQ(s.Add("Checking").content, "Checking");
  EXPECT_EQ(s.Add(" now <tool").content, " now ");  // "<tool" may be the marker: held
  ToolCallDelta d = s.Add("_call>\n{\"name\": \"now\", \"arguments\": {}}");
  EXPECT_TRUE(d.content.empty());
  EXPECT_TRUE(d.calls.empty());
  d = s.Add("\n</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "now");
  EXPECT_EQ(d.calls[0].arguments, "{}");
  d = s.Finish();
  EXPECT_TRUE(d.content.empty());
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(s.num_calls(), 1);
}

}  // namespace
}  // namespace pagoda
