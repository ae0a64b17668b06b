#include "tokenizer/special_token_matcher.h"

#include <algorithm>

namespace pagoda {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

void SpecialTokenMatcher::Add(SpecialToken token) {
  if (token.content.empty()) return;
  auto& bucket = by_first_byte_[static_cast<uint8_t>(token.content[0])];
  tokens_.push_back(std::move(token));
  bucket.push_back(tokens_.size() - 1);
  std::stable_sort(bucket.begin(), bucket.end(), [this](size_t a, size_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
}

std::vector<TextFragment> SpecialTokenMatcher::Split(std::string_view text,
                                                     bool parse_special) const {
  std::vector<TextFragment> out;
  size_t text_start = 0;  // start of the pending plain-text run
  size_t pos = 0;
  while (pos < text.size()) {
    const SpecialToken* match = nullptr;
    for (size_t idx : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const SpecialToken& t = tokens_[idx];
      if (t.needs_parse_special && !parse_special) continue;
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t text_end = pos;
    if (match->lstrip) {
      while (text_end > text_start && IsSpace(text[text_end - 1])) --text_end;
    }
    if (text_end > text_start) out.push_back({text.substr(text_start, text_end - text_start), -1});
    out.push_back({text.substr(pos, match->content.size()), match->id});
    pos += match->content.size();
    if (match->rstrip) {
      while (pos < text.size() && IsSpace(text[pos])) ++pos;
    }
    text_start = pos;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
  return out;
}

}  // namespace pagoda
