// IncrementalDetokenizer, the way vLLM's detokenize_incrementally works: decode a
// short window of ids twice (with and without the newest ones) and emit the
// difference once the window ends on a complete UTF-8 character. Decoding the same
// window both times keeps SentencePiece's leading-space rule consistent, and the
// window keeps the cost per token constant.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

// vLLM's convert_prompt_ids_to_tokens: the window starts 5 tokens before the end of the
// prompt (7 kept: a byte-fallback character of up to 4 tokens right before the window
// still decodes whole), so the first generated piece is decoded in context.
IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {
  constexpr size_t kContext = 5;
  const size_t keep = std::min(prompt.size(), kContext + 2);
  ids_.assign(prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  read_offset_ = ids_.size();
  prefix_offset_ = read_offset_ > kContext ? read_offset_ - kContext : 0;
}

std::string IncrementalDetokenizer::Add(int32_t id) {
  ids_.push_back(id);
  std::span<const int32_t> all(ids_);
  std::string prefix =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  std::string text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_);
  if (text.size() <= prefix.size() || CompleteUtf8Prefix(text) != text.size()) return "";
  std::string fresh = text.substr(prefix.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  emitted_bytes_ += fresh.size();
  return fresh;
}

std::string IncrementalDetokenizer::Flush() {
  std::span<const int32_t> all(ids_);
  std::string prefix =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  std::string text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (text.size() <= prefix.size()) return "";
  emitted_bytes_ += text.size() - prefix.size();
  return text.substr(prefix.size());
}

}  // namespace pagoda
