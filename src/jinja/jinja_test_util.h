// Shared helpers of the Jinja and chat-template tests: locating the golden
// files and the fixture templates (never skipping when they are missing), and
// parsing and rendering a template the way jinja2's
// Environment.from_string(source).render(**context) does.
#pragma once

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace pagoda::jinja::testing {

inline std::string ReadFileOrFail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// $PAGODA_FIXTURES, else <source>/../shared/fixtures.
inline std::string FixturesDir() {
  if (const char* env = std::getenv("PAGODA_FIXTURES"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

inline nlohmann::ordered_json LoadGolden(const std::string& name) {
  std::string text = ReadFileOrFail(std::string(PAGODA_SOURCE_DIR) + "/tests/data/" + name);
  return nlohmann::ordered_json::parse(text);
}

// Throws pagoda::Error "<origin>:<line>: syntax error: ..." for a malformed template.
inline NodeList Parse(const std::string& source, const std::string& origin) {
  return ParseTemplate(Tokenize(source, origin), origin);
}

// Renders `nodes` with the members of `context` (a JSON object) as the top-level
// variables; `now` is what strftime_now() formats (nullopt: the current time).
inline std::string Render(const NodeList& nodes, const std::string& origin,
                          const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                          RenderLimits limits = {}, std::optional<std::time_t> now = std::nullopt) {
  DictData top_level;
  for (auto it = context.begin(); it != context.end(); ++it) {
    top_level.Set(it.key(), Value::FromJson(it.value()));
  }
  Interpreter interpreter(origin, limits, now);
  return interpreter.Render(nodes, top_level);
}

}  // namespace pagoda::jinja::testing
