#include "core/memory_info.h"

#include <cstdio>
#include <cstring>

namespace pagoda {
namespace {
int64_t ReadMeminfo(const char* key) {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kib = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      long long v = 0;
      if (std::sscanf(line + n + 1, "%lld", &v) == 1) kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}
}  // namespace

int64_t AvailableMemoryBytes() { return ReadMeminfo("MemAvailable"); }
int64_t TotalMemoryBytes() { return ReadMeminfo("MemTotal"); }

}  // namespace pagoda
