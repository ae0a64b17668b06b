// Errors and invariant checks used everywhere in pagoda.
//
// Bad input or environment (a corrupt file, an unknown tensor type, an invalid
// request) throws pagoda::Error, whose message names the file, field or request.
// The CLI and HTTP boundaries catch it and turn it into an exit code or an
// OpenAI-style error. Broken invariants (bugs) use PAGODA_CHECK, which aborts with
// file:line, or PAGODA_DCHECK on hot paths (debug builds only).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pagoda {

enum class ErrorCode {
  kInvalidArgument,  // a bad flag, request field or value
  kNotFound,         // a missing file, tensor or key
  kUnsupported,      // a valid input pagoda does not handle (an unknown architecture)
  kCorruptData,      // a file that is truncated or inconsistent
  kResourceExhausted,
  kInternal,
};

const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Builds a message with operator<< and throws it as pagoda::Error:
//   throw ErrorBuilder(ErrorCode::kCorruptData) << path << ": tensor " << name << " ...";
// (ErrorBuilder converts to Error when thrown through Raise()).
class ErrorBuilder {
 public:
  explicit ErrorBuilder(ErrorCode code) : code_(code) {}
  template <typename T>
  ErrorBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  [[noreturn]] void Raise() const { throw Error(code_, stream_.str()); }

 private:
  ErrorCode code_;
  std::ostringstream stream_;
};

[[noreturn]] void ThrowError(ErrorCode code, const std::string& message);

[[noreturn]] inline void ThrowInvalidArgument(const std::string& m) { ThrowError(ErrorCode::kInvalidArgument, m); }
[[noreturn]] inline void ThrowNotFound(const std::string& m) { ThrowError(ErrorCode::kNotFound, m); }
[[noreturn]] inline void ThrowUnsupported(const std::string& m) { ThrowError(ErrorCode::kUnsupported, m); }
[[noreturn]] inline void ThrowCorrupt(const std::string& m) { ThrowError(ErrorCode::kCorruptData, m); }

namespace internal {
// Streams a message, then aborts with file:line in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};
// Lets `PAGODA_CHECK(c) << msg` be an expression of type void.
struct Voidify {
  void operator&(const CheckFailure&) {}
};
}  // namespace internal

}  // namespace pagoda

// Always-on invariant check: aborts with file:line and the streamed message.
#define PAGODA_CHECK(cond)                                  \
  (cond) ? (void)0                                          \
         : ::pagoda::internal::Voidify() &                  \
               ::pagoda::internal::CheckFailure(__FILE__, __LINE__, #cond)

#ifdef NDEBUG
#define PAGODA_DCHECK(cond) \
  while (false) PAGODA_CHECK(cond)
#else
#define PAGODA_DCHECK(cond) PAGODA_CHECK(cond)
#endif

// Throws pagoda::Error(code) with a streamed message when cond is false.
#define PAGODA_ENSURE(cond, code, msg)                               \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::ostringstream pagoda_ensure_stream_;                      \
      pagoda_ensure_stream_ << msg;                                  \
      ::pagoda::ThrowError(code, pagoda_ensure_stream_.str());       \
    }                                                                \
  } while (false)
