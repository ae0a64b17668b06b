#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

namespace pagoda::testing {

std::string FixturesDir() {
  if (const char* env = std::getenv("PAGODA_FIXTURES"); env != nullptr && *env != '\0') return env;
  return std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

std::string Fixture(const std::string& relative) {
  std::string path = FixturesDir() + "/" + relative;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    ADD_FAILURE() << "fixture missing: " << path << " (set PAGODA_FIXTURES)";
  }
  return path;
}

}  // namespace pagoda::testing
