#include "core/memory_info.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pagoda {

int64_t ReadMeminfoBytes(std::string_view field, const std::string& path) {
  std::ifstream in(path);
  if (!in) ThrowNotFound(path + ": cannot open");
  const std::string prefix = std::string(field) + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    int64_t kib = -1;
    std::string unit;
    fields >> kib >> unit;
    for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (kib < 0 || unit != "kb") break;
    return kib * 1024;
  }
  ThrowNotFound(path + ": no readable " + std::string(field) + " line");
}

namespace {
// The machine's figure, 0 where /proc/meminfo is missing (a sandbox, another OS): callers
// treat 0 as "unknown" and skip the check that needed it.
int64_t ReadOrZero(std::string_view field) {
  try {
    return ReadMeminfoBytes(field);
  } catch (const Error&) {
    return 0;
  }
}
}  // namespace

int64_t AvailableMemoryBytes() { return ReadOrZero("MemAvailable"); }
int64_t TotalMemoryBytes() { return ReadOrZero("MemTotal"); }

}  // namespace pagoda
