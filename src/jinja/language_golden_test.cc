// The Jinja language, one construct per template, against jinja2's own output
// (tests/data/jinja_language_golden.json, written by
// tests/tools/render_chat_templates.py): literals, operators, filters, tests,
// loops, scoping, macros, whitespace control, tojson and the error cases.
#include <gtest/gtest.h>

#include "jinja/jinja_test_util.h"

namespace pagoda::jinja {
namespace {

using Json = nlohmann::ordered_json;

TEST(JinjaLanguageGoldenTest, EveryCaseMatchesJinja2) {
  Json golden = testing::LoadGolden("jinja_language_golden.json");
  ASSERT_GE(golden["cases"].size(), 50u);
  int num_failed = 0;
  for (const auto& c : golden["cases"]) {
    std::string source = c["template"].get<std::string>();
    std::string got;
    std::string error;
    bool parse_error = false;
    try {
      NodeList nodes = testing::Parse(source, "case");
      try {
        got = testing::Render(nodes, "case", c["context"], RenderLimits{},
                              golden["now"].get<std::time_t>());
      } catch (const Error& e) {
        error = e.what();
      }
    } catch (const Error& e) {
      error = e.what();
      parse_error = true;
    }
    if (c.contains("output")) {
      if (!error.empty() || got != c["output"].get<std::string>()) {
        ++num_failed;
        ADD_FAILURE() << "template: " << source << "\nexpected: " << c["output"]
                      << "\ngot:      " << Json(got) << (error.empty() ? "" : "\nerror: " + error);
      }
      continue;
    }
    // An error case: we must fail too; syntax errors at parse time, with the
    // line jinja2 reports; raise_exception with its exact message.
    if (error.empty()) {
      ++num_failed;
      ADD_FAILURE() << "template: " << source << "\nexpected error " << c["message"]
                    << "\ngot output: " << Json(got);
    } else if (c["error"] == "raise" && error != c["message"].get<std::string>()) {
      ++num_failed;
      ADD_FAILURE() << "template: " << source << "\nexpected: " << c["message"] << "\ngot: " << error;
    } else if (c["error"] == "syntax" && !parse_error) {
      ++num_failed;
      ADD_FAILURE() << "template: " << source << "\nexpected a syntax error, got: " << error;
    } else if (c["error"] == "syntax" && c.contains("line") && c["line"].is_number()) {
      std::string want = "case:" + std::to_string(c["line"].get<int>()) + ":";
      if (error.rfind(want, 0) != 0) {
        ++num_failed;
        ADD_FAILURE() << "template: " << source << "\nexpected line " << c["line"]
                      << " (" << c["message"] << "), got: " << error;
      }
    }
  }
  EXPECT_EQ(num_failed, 0);
}

}  // namespace
}  // namespace pagoda::jinja
