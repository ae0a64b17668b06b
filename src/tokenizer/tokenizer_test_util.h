// Helpers for the tokenizer unit tests: fixture paths and file reading.
// Fixtures live in $PAGODA_FIXTURES, else PAGODA_SOURCE_DIR/../shared/fixtures.
// A missing fixture is a test failure (never a skip): Fixture() records a failure
// and throws, which GoogleTest reports against the running test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::testing {

inline std::string FixtureRoot() {
  const char* env = std::getenv("PAGODA_FIXTURES");
  if (env != nullptr && *env != '\0') return env;
  return std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

inline std::string TokFixture(const std::string& relative) {
  std::string path = FixtureRoot() + "/" + relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing fixture " << path << " (set PAGODA_FIXTURES)";
    throw std::runtime_error("missing fixture " + path);
  }
  return path;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadAll(path));
}

inline std::vector<std::string> TestStrings() {
  return ReadJson(TokFixture("tokenizers/strings.json")).get<std::vector<std::string>>();
}

// Writes `bytes` to a fresh file under the test temp dir and returns its path.
inline std::string WriteTemp(const std::string& name, const std::string& bytes) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagoda_tokenizer_tests";
  std::filesystem::create_directories(dir);
  std::filesystem::path full = dir / name;
  std::filesystem::create_directories(full.parent_path());
  std::string path = full.string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace pagoda::testing
