// ChatTemplate against jinja2: every fixture template on every conversation of
// tests/data/chat_template_golden.json (written by
// tests/tools/render_chat_templates.py) must render byte for byte as jinja2
// does, and raise_exception must surface the template's own message.
#include "tokenizer/chat_template.h"

#include <chrono>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "jinja/jinja_test_util.h"

namespace pagoda {
namespace {

using jinja::testing::FixturesDir;
using jinja::testing::LoadGolden;
using jinja::testing::ReadFileOrFail;
using Json = nlohmann::ordered_json;

std::string TemplatePath(const std::string& name) {
  return FixturesDir() + "/chat-templates/" + name;
}

TEST(ChatTemplateGoldenTest, EveryFixtureTemplateIsCovered) {
  Json golden = LoadGolden("chat_template_golden.json");
  std::set<std::string> in_golden;
  for (const auto& c : golden["cases"]) {
    std::string name = c["template"].get<std::string>();
    if (!golden["embedded_templates"].contains(name)) in_golden.insert(name);
  }
  std::set<std::string> on_disk;
  std::string dir = FixturesDir() + "/chat-templates";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "missing fixtures: " << dir;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".jinja") on_disk.insert(entry.path().filename().string());
  }
  EXPECT_EQ(on_disk, in_golden);
  EXPECT_GE(on_disk.size(), 7u);
}

TEST(ChatTemplateGoldenTest, RendersEveryFixtureLikeJinja2) {
  Json golden = LoadGolden("chat_template_golden.json");
  std::map<std::string, Json> conversations;
  for (const auto& conv : golden["conversations"]) {
    conversations[conv["name"].get<std::string>()] = conv;
  }
  std::map<std::string, ChatTemplate> templates;
  int num_checked = 0, num_failed = 0;
  for (const auto& c : golden["cases"]) {
    std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) {
      // Fixture templates are read from the fixtures; well-known ones are embedded.
      const Json& embedded = golden["embedded_templates"];
      std::string source = embedded.contains(name) ? embedded[name].get<std::string>()
                                                   : ReadFileOrFail(TemplatePath(name));
      templates.emplace(name, ChatTemplate::Parse(source, name));
    }
    const Json& conv = conversations.at(c["conversation"].get<std::string>());
    ChatTemplateInputs inputs;
    inputs.messages = conv["messages"];
    inputs.tools = conv.contains("tools") ? conv["tools"] : Json(nullptr);
    inputs.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    inputs.bos_token = golden["bos_token"].get<std::string>();
    inputs.eos_token = golden["eos_token"].get<std::string>();
    if (conv.contains("extra")) inputs.extra_context = conv["extra"];
    inputs.now = golden["now"].get<std::time_t>();
    std::string where = name + " x " + conv["name"].get<std::string>() +
                        (inputs.add_generation_prompt ? " (generation prompt)" : "");
    ++num_checked;
    if (c.contains("output")) {
      try {
        std::string out = templates.at(name).Render(inputs);
        if (out != c["output"].get<std::string>()) {
          ++num_failed;
          ADD_FAILURE() << where << "\n--- expected ---\n"
                        << c["output"].get<std::string>() << "\n--- got ---\n" << out;
        }
      } catch (const Error& e) {
        ++num_failed;
        ADD_FAILURE() << where << ": unexpected error: " << e.what();
      }
    } else {
      try {
        std::string out = templates.at(name).Render(inputs);
        ++num_failed;
        ADD_FAILURE() << where << ": expected error " << c["message"] << ", got output:\n" << out;
      } catch (const jinja::RaisedError& e) {
        if (c["error"] != "raise" || c["message"].get<std::string>() != e.what()) {
          ++num_failed;
          ADD_FAILURE() << where << ": expected " << c["error"] << " " << c["message"]
                        << ", got raise_exception: " << e.what();
        }
      } catch (const Error& e) {
        if (c["error"] == "raise") {
          ++num_failed;
          ADD_FAILURE() << where << ": expected raise_exception " << c["message"]
                        << ", got: " << e.what();
        }
      }
    }
  }
  EXPECT_EQ(num_failed, 0) << "of " << num_checked;
  EXPECT_GE(num_checked, 500);
}

TEST(ChatTemplateTest, RaiseExceptionCarriesTheTemplateMessage) {
  ChatTemplate t = ChatTemplate::Parse(
      ReadFileOrFail(TemplatePath("google-gemma-2-2b-it.jinja")), "gemma");
  Json messages = Json::parse(R"([{"role": "system", "content": "x"}])");
  try {
    t.Render(messages, nullptr, true, "<bos>", "<eos>");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "System role not supported");
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(ChatTemplateTest, KeepsKeyOrderOfToolArguments) {
  ChatTemplate t = ChatTemplate::Parse(
      "{% for m in messages %}{{ m.tool_calls[0].function.arguments | tojson }}{% endfor %}",
      "inline");
  Json messages = Json::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": {"z": 1, "a": {"y": [1.0, 2], "b": "é"}}}}]}])");
  EXPECT_EQ(t.Render(messages, nullptr, false, "", ""),
            R"({"z": 1, "a": {"y": [1.0, 2], "b": "é"}})");
}

TEST(ChatTemplateTest, ExtraContextOverridesAndStrftimeUsesTheGivenClock) {
  ChatTemplate t = ChatTemplate::Parse(
      "{{ enable_thinking }} {{ strftime_now('%Y-%m-%d') }} {{ tools is none }}", "inline");
  ChatTemplateInputs inputs;
  inputs.extra_context = Json::parse(R"({"enable_thinking": false})");
  inputs.now = 1721995200;  // 2024-07-26 12:00 UTC
  EXPECT_EQ(t.Render(inputs), "False 2024-07-26 True");
}

TEST(ChatTemplateTest, SyntaxErrorsNameOriginAndLine) {
  try {
    ChatTemplate::Parse("line one\n{% if x %}\nnever closed\n", "my_template.jinja");
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my_template.jinja:2:"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateTest, RendersFiftyMessagesQuickly) {
  ChatTemplate t = ChatTemplate::Parse(
      ReadFileOrFail(TemplatePath("meta-llama-Llama-3.1-8B-Instruct.jinja")), "llama");
  Json messages = Json::array();
  messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
  for (int i = 0; i < 50; ++i) {
    messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"},
                        {"content", "message number " + std::to_string(i) +
                                        " with a few words of text in it"}});
  }
  std::string out = t.Render(messages, nullptr, true, "<s>", "</s>");
  ASSERT_NE(out.find("message number 49"), std::string::npos);
  constexpr int kIterations = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) out = t.Render(messages, nullptr, true, "<s>", "</s>");
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count() / kIterations;
  std::printf("Llama 3.1 template, 51 messages: %.1f us per render\n", us);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(us, 2000.0);
#endif
}

}  // namespace
}  // namespace pagoda
