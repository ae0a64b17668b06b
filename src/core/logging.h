// Logging to stderr. stdout belongs to the command's result (--json prints one
// document there and nothing else), so every log line, warning and progress bar
// goes to stderr.
#pragma once

#include <sstream>
#include <string>

namespace pagoda {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; PAGODA_LOG_LEVEL=debug|info|warning|error.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Writes one line "[pagoda] I message" to stderr, atomically with respect to other log lines.
void LogLine(LogLevel level, const std::string& message);

namespace internal {
class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { LogLine(level_, stream_.str()); }
  template <typename T>
  LogMessage& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace pagoda

#define PAGODA_LOG(level)                                           \
  if (::pagoda::LogLevel::level < ::pagoda::GetLogLevel()) {        \
  } else                                                            \
    ::pagoda::internal::LogMessage(::pagoda::LogLevel::level)
