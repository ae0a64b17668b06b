// Limits and error reporting of the Jinja engine: hostile or broken templates
// fail with a clear pagoda::Error naming the line, never crash or hang.
#include "jinja/interpreter.h"

#include <gtest/gtest.h>

#include "jinja/jinja_test_util.h"

namespace pagoda::jinja {
namespace {

// Returns the error message of parsing and rendering `source`, or "" on success.
std::string ErrorOf(const std::string& source, RenderLimits limits = {}) {
  try {
    NodeList nodes = testing::Parse(source, "t.jinja");
    testing::Render(nodes, "t.jinja", nlohmann::ordered_json::object(), limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(JinjaErrorTest, SyntaxErrorsCarryTheLine) {
  EXPECT_TRUE(Contains(ErrorOf("a\nb\n{% if x %}\nc"), "t.jinja:3: syntax error")) << ErrorOf("a\nb\n{% if x %}\nc");
  EXPECT_TRUE(Contains(ErrorOf("a\n{{ x"), "t.jinja:2: syntax error"));
  EXPECT_TRUE(Contains(ErrorOf("\n\n{{ x | nosuch }}"), "t.jinja:3: syntax error: no filter named 'nosuch'"));
  EXPECT_TRUE(Contains(ErrorOf("{{ 1 + }}"), "t.jinja:1: syntax error"));
  EXPECT_TRUE(Contains(ErrorOf("{% for x in y %}{% endif %}"), "syntax error"));
  EXPECT_TRUE(Contains(ErrorOf("{{ 'abc }}"), "unterminated string"));
  EXPECT_TRUE(Contains(ErrorOf("{{ (1 ] }}"), "unexpected ']'"));
  EXPECT_TRUE(Contains(ErrorOf("{% frob %}"), "unknown tag 'frob'"));
}

TEST(JinjaErrorTest, RuntimeErrorsCarryTheLine) {
  EXPECT_TRUE(Contains(ErrorOf("\n{{ x + 1 }}"), "t.jinja:2: 'x' is undefined"));
  EXPECT_TRUE(Contains(ErrorOf("\n\n{{ 'a' + 1 }}"), "t.jinja:3: can only concatenate str"));
  EXPECT_TRUE(Contains(ErrorOf("{{ [].append(1) }}"), "unsafe"));
  EXPECT_EQ(ErrorOf("{{ raise_exception('exact message') }}"), "exact message");
}

TEST(JinjaLimitsTest, DeepExpressionNestingIsAnErrorNotAStackOverflow) {
  std::string source = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_TRUE(Contains(ErrorOf(source), "nested too deeply"));
  std::string unary = "{{ " + std::string(100000, '-') + "1 }}";
  EXPECT_TRUE(Contains(ErrorOf(unary), "nested too deeply"));
}

TEST(JinjaLimitsTest, DeepBlockNestingIsAnError) {
  std::string source;
  for (int i = 0; i < 5000; ++i) source += "{% if true %}";
  for (int i = 0; i < 5000; ++i) source += "{% endif %}";
  EXPECT_TRUE(Contains(ErrorOf(source), "nested too deeply"));
}

TEST(JinjaLimitsTest, InfiniteMacroRecursionIsBounded) {
  EXPECT_TRUE(Contains(ErrorOf("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
                       "recursion too deep"));
}

TEST(JinjaLimitsTest, HugeLoopsAreBounded) {
  RenderLimits limits;
  limits.max_steps = 100000;
  EXPECT_TRUE(Contains(ErrorOf("{% for i in range(100000) %}{% for j in range(100000) %}"
                               "{% endfor %}{% endfor %}",
                               limits),
                       "steps"));
  EXPECT_TRUE(Contains(ErrorOf("{% for i in range(1000000) %}{% endfor %}"), "Range too big"));
}

TEST(JinjaLimitsTest, OutputSizeIsBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  EXPECT_TRUE(Contains(ErrorOf("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", limits),
                       "exceeds"));
  EXPECT_TRUE(Contains(ErrorOf("{{ 'x' * 100000000000 }}", limits), "exceeds"));
  EXPECT_TRUE(Contains(ErrorOf("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                               limits),
                       "exceeds"));
}

TEST(JinjaInterpreterTest, BreakAndContinueOnlyLeaveTheInnermostLoop) {
  NodeList nodes = testing::Parse(
      "{% for i in [1, 2, 3] %}{% for j in [1, 2, 3] %}{% if j == 2 %}{% break %}{% endif %}"
      "{{ i }}{{ j }} {% endfor %}{% if i == 2 %}{% continue %}{% endif %}|{% endfor %}",
      "t");
  EXPECT_EQ(testing::Render(nodes, "t"), "11 |21 31 |");
}

}  // namespace
}  // namespace pagoda::jinja
