// Pcre2Regex: a compiled PCRE2 pattern with UTF and UCP semantics (\p{L}, \s and \d
// are Unicode-aware, as in HF tokenizers' Oniguruma and llama.cpp's unicode regexes),
// JIT-compiled when available. Invalid UTF-8 in the subject is tolerated
// (PCRE2_MATCH_INVALID_UTF): it simply never matches a character class.
// Immutable after construction; ForEachMatch is thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace pagoda {

class Pcre2Regex {
 public:
  // `literal` treats the pattern as a plain string. Throws kInvalidArgument naming
  // `context` and the PCRE2 message when the pattern does not compile.
  Pcre2Regex(const std::string& pattern, const std::string& context, bool literal = false);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Calls fn(start, end) for each non-overlapping match, left to right. Empty
  // matches are reported too (as split points); the search then moves on by one
  // character.
  void ForEachMatch(std::string_view subject, const std::function<void(size_t, size_t)>& fn) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace pagoda
