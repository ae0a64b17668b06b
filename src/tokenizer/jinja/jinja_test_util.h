// Shared helpers of the Jinja and chat-template tests: locating the golden
// files and the fixture templates (never skipping when they are missing).
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace pagoda::jinja::testing
