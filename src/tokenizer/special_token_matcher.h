// SpecialTokenMatcher: finds added/special tokens in text before BPE runs, the way
// llama.cpp's tokenizer_st_partition and HF tokenizers' AddedVocabulary do.
//
// Matching is leftmost-longest: at each position the longest registered token that
// matches wins. Tokens marked `needs_parse_special` (control tokens, HF special added
// tokens) are only matched when the caller asks; the others (user-defined pieces, HF
// non-special added tokens) always are. Immutable after construction: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct SpecialToken {
  std::string content;
  int32_t id = -1;
  bool needs_parse_special = true;
  bool lstrip = false;  // swallow whitespace on the left of a match
  bool rstrip = false;  // swallow whitespace on the right of a match
};

// A piece of the input: plain text (token_id < 0) or one matched token.
struct TextFragment {
  std::string_view text;
  int32_t token_id = -1;
};

class SpecialTokenMatcher {
 public:
  void Add(SpecialToken token);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into fragments; plain-text fragments are never empty.
  std::vector<TextFragment> Split(std::string_view text, bool parse_special) const;

 private:
  std::vector<SpecialToken> tokens_;
  // For each first byte, indices into tokens_ sorted by length, longest first.
  std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
};

}  // namespace pagoda
