#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace pagoda {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kCorruptData: return "corrupt data";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kInternal: return "internal error";
  }
  return "error";
}

void ThrowError(ErrorCode code, const std::string& message) { throw Error(code, message); }

namespace internal {
CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}
CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace internal

}  // namespace pagoda
