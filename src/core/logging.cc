#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace pagoda {
namespace {

LogLevel InitialLevel() {
  const char* env = std::getenv("PAGODA_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(InitialLevel())};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Level().load()); }

void LogLine(LogLevel level, const std::string& message) {
  static std::mutex mu;
  static const char kTags[] = {'D', 'I', 'W', 'E'};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[pagoda] %c %s\n", kTags[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace pagoda
