#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁"

std::string EscapeWhitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpaceSymbol);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string UnescapeWhitespace(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out.push_back(' ');
      i += kSpaceSymbol.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

// Parses "<0xXX>"; returns -1 for anything else.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    char c = piece[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t size;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(SpmVocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.pieces.size();
  const std::string& src = vocab_.source;
  PAGODA_ENSURE(n > 0, ErrorCode::kCorruptData, src << ": the vocabulary is empty");
  PAGODA_ENSURE(vocab_.scores.size() == n, ErrorCode::kCorruptData,
                src << ": " << vocab_.scores.size() << " scores for " << n << " tokens");
  PAGODA_ENSURE(vocab_.types.size() == n, ErrorCode::kCorruptData,
                src << ": " << vocab_.types.size() << " token types for " << n << " tokens");
  PAGODA_ENSURE(n <= (size_t{1} << 31) - 1, ErrorCode::kCorruptData, src << ": too many tokens");
  auto check_id = [&](int32_t id, const char* what) {
    PAGODA_ENSURE(id >= -1 && id < static_cast<int64_t>(n), ErrorCode::kCorruptData,
                  src << ": " << what << " id " << id << " is outside the vocabulary of " << n);
  };
  check_id(vocab_.bos_id, "BOS");
  check_id(vocab_.unk_id, "unknown-token");
  for (int32_t id : vocab_.eos_ids) check_id(id, "EOS");
  if (vocab_.add_bos && vocab_.bos_id < 0) vocab_.add_bos = false;

  byte_ids_.fill(-1);
  isolating_.fill(true);
  for (size_t i = 0; i < n; ++i) {
    const std::string& piece = vocab_.pieces[i];
    TokenType type = vocab_.types[i];
    int byte = ParseBytePiece(piece);
    if (byte >= 0 && (type == TokenType::kByte || vocab_.llama2c_mode) && byte_ids_[byte] < 0) {
      byte_ids_[byte] = static_cast<int32_t>(i);
    }
    bool mergeable = vocab_.llama2c_mode || type == TokenType::kNormal ||
                     type == TokenType::kUserDefined || type == TokenType::kUnused ||
                     type == TokenType::kUndefined;
    if (mergeable && !piece.empty()) {
      mergeable_.emplace(piece, static_cast<int32_t>(i));
      if (Utf8CharLength(piece, 0) < piece.size()) {
        for (char c : piece) {
          if (static_cast<uint8_t>(c) < 128) isolating_[static_cast<uint8_t>(c)] = false;
        }
      }
    }
    if (type == TokenType::kUserDefined || type == TokenType::kControl) {
      // User-defined pieces are atomic in sentencepiece; control pieces only with
      // parse_special. Pieces containing "▁" are matched against the raw text.
      SpecialToken t;
      t.content = UnescapeWhitespace(piece);
      t.id = static_cast<int32_t>(i);
      t.needs_parse_special = type == TokenType::kControl;
      t.rstrip = vocab_.rstrip_ids.count(static_cast<int32_t>(i)) != 0;
      specials_.Add(std::move(t));
    }
  }
}

bool SpmTokenizer::IsSpecial(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::string SpmTokenizer::TokenPiece(int32_t id) const {
  PAGODA_ENSURE(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                "token id " << id << " is outside the vocabulary of " << vocab_size());
  return vocab_.pieces[id];
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view input,
                                          const EncodeOptions& options) const {
  std::string collapsed;
  std::string_view text = input;
  if (vocab_.remove_extra_whitespaces) {
    for (char c : input) {
      if (c == ' ' && (collapsed.empty() || collapsed.back() == ' ')) continue;
      collapsed.push_back(c);
    }
    if (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
    text = collapsed;
  }
  std::vector<int32_t> out;
  bool prev_special = true;  // the dummy prefix goes on the first fragment
  bool at_start = true;
  if (options.add_special_tokens && vocab_.add_bos) out.push_back(vocab_.bos_id);
  for (const TextFragment& f : specials_.Split(text, options.parse_special)) {
    bool prefix =
        vocab_.add_space_prefix && (vocab_.prefix_after_special ? prev_special : at_start);
    at_start = false;
    if (f.token_id >= 0) {
      // sentencepiece puts the dummy prefix before a leading user-defined piece.
      if (prefix && !vocab_.prefix_after_special) EncodeFragment(std::string(kSpaceSymbol), &out);
      out.push_back(f.token_id);
      prev_special = true;
      continue;
    }
    std::string fragment;
    if (prefix) fragment = " ";
    fragment.append(f.text);
    EncodeFragment(EscapeWhitespace(fragment), &out);
    prev_special = false;
  }
  if (options.add_special_tokens && vocab_.add_eos && !vocab_.eos_ids.empty()) {
    out.push_back(vocab_.eos_ids[0]);
  }
  return out;
}

void SpmTokenizer::AppendByteFallback(std::string_view symbol, std::vector<int32_t>* out) const {
  for (char c : symbol) {
    int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) id = vocab_.unk_id;
    if (id < 0) {
      (ErrorBuilder(ErrorCode::kInvalidArgument)
       << vocab_.source << ": the text has a character the vocabulary cannot encode "
       << "(no byte pieces and no unknown token)")
          .Raise();
    }
    if (id >= 0) out->push_back(id);
  }
}

void SpmTokenizer::EncodeFragment(const std::string& text, std::vector<int32_t>* out) const {
  size_t begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<uint8_t>(text[i]);
    if (c >= 128 || !isolating_[c]) continue;
    EncodeRun(text, begin, i, out);
    EncodeRun(text, i, i + 1, out);
    begin = i + 1;
  }
  EncodeRun(text, begin, text.size(), out);
}

void SpmTokenizer::EncodeRun(const std::string& text, size_t begin, size_t end,
                             std::vector<int32_t>* out) const {
  if (begin >= end) return;
  std::vector<Symbol> symbols;
  for (size_t pos = begin; pos < end;) {
    size_t len = std::min(Utf8SequenceLength(static_cast<uint8_t>(text[pos])), end - pos);
    int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, pos + len < end ? idx + 1 : -1, pos, len});
    pos += len;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> agenda;
  // Merged piece text -> (left size, right size), to split unused pieces back.
  std::unordered_map<std::string, std::pair<size_t, size_t>> rev_merge;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    std::string_view piece = std::string_view(text).substr(l.start, l.size + r.size);
    auto it = mergeable_.find(piece);
    if (it == mergeable_.end()) return;
    agenda.push({left, right, vocab_.scores[it->second], piece.size()});
    if (vocab_.types[it->second] == TokenType::kUnused) {
      rev_merge.emplace(std::string(piece), std::make_pair(l.size, r.size));
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!agenda.empty()) {
    Bigram b = agenda.top();
    agenda.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;  // stale
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Resegments a symbol: its piece id, the two halves of an unused piece, or bytes.
  auto resegment = [&](auto&& self, std::string_view piece) -> void {
    auto it = mergeable_.find(piece);
    if (it != mergeable_.end()) {
      if (vocab_.types[it->second] == TokenType::kUnused && !vocab_.llama2c_mode) {
        auto split = rev_merge.find(std::string(piece));
        if (split != rev_merge.end()) {
          self(self, piece.substr(0, split->second.first));
          self(self, piece.substr(split->second.first));
          return;
        }
      }
      out->push_back(it->second);
      return;
    }
    AppendByteFallback(piece, out);
  };
  for (int i = 0; i != -1; i = symbols[i].next) {
    resegment(resegment, std::string_view(text).substr(symbols[i].start, symbols[i].size));
  }
}

std::string SpmTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first_text = true;  // sentencepiece: the first text piece loses its leading space
  int32_t prev = -1;
  for (int32_t id : ids) {
    PAGODA_ENSURE(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                  "token id " << id << " is outside the vocabulary of " << vocab_size());
    const std::string& piece = vocab_.pieces[id];
    TokenType type = vocab_.types[id];
    int byte = ParseBytePiece(piece);
    if (type == TokenType::kControl && !(vocab_.llama2c_mode && byte >= 0)) {
      if (!skip_special) out.append(piece);
      prev = id;
      continue;
    }
    if (byte >= 0 && (type == TokenType::kByte || vocab_.llama2c_mode)) {
      out.push_back(static_cast<char>(byte));
      first_text = false;
      prev = id;
      continue;
    }
    if (type == TokenType::kUnknown) {
      if (!skip_special || vocab_.llama2c_mode)
        out.append(vocab_.llama2c_mode ? piece : " \xE2\x81\x87 ");
      first_text = false;
      prev = id;
      continue;
    }
    std::string text = UnescapeWhitespace(piece);
    bool strip = vocab_.llama2c_mode ? (prev == vocab_.bos_id && prev >= 0)
                                     : (first_text && vocab_.add_space_prefix);
    if (strip && !text.empty() && text[0] == ' ') text.erase(0, 1);
    out.append(text);
    first_text = false;
    prev = id;
  }
  return out;
}

}  // namespace pagoda
