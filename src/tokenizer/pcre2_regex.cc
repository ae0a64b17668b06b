#include "tokenizer/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace pagoda {

Pcre2Regex::Pcre2Regex(const std::string& pattern, const std::string& context, bool literal)
    : pattern_(pattern) {
  // PCRE2_LITERAL allows only a few other options (no UCP, no DOLLAR_ENDONLY).
  uint32_t options = literal
                         ? PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL
                         : PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &error, &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    (ErrorBuilder(ErrorCode::kInvalidArgument)
     << context << ": regex \"" << pattern << "\" does not compile at offset " << offset << ": "
     << reinterpret_cast<const char*>(message))
        .Raise();
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // best effort; falls back to the interpreter
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(code_); }

void Pcre2Regex::ForEachMatch(std::string_view subject,
                              const std::function<void(size_t, size_t)>& fn) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  PAGODA_CHECK(match != nullptr) << "out of memory creating PCRE2 match data";
  auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos <= subject.size()) {
    int rc = pcre2_match(code_, s, subject.size(), pos, 0, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      (ErrorBuilder(ErrorCode::kInvalidArgument)
       << "regex \"" << pattern_ << "\" failed: " << reinterpret_cast<const char*>(message))
          .Raise();
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    size_t start = ov[0], end = ov[1];
    if (end < start) break;  // \K tricks; not used by tokenizer patterns
    fn(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (start >= subject.size()) break;
      pos = start + Utf8CharLength(subject, start);
    }
  }
}

}  // namespace pagoda
