// Helpers for golden and end-to-end tests: where the fixtures are.
#pragma once

#include <string>

namespace pagoda::testing {

// $PAGODA_FIXTURES, or ../shared/fixtures beside the repository root.
std::string FixturesDir();
// FixturesDir() + "/" + relative; fails the test (never skips) when the file is missing.
std::string Fixture(const std::string& relative);

}  // namespace pagoda::testing
