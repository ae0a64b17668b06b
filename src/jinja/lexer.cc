#include "jinja/lexer.h"

#include <cstring>

#include "core/error.h"

namespace pagoda::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Normalizes newlines to \n and drops one trailing newline (keep_trailing_newline=False).
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string Unescape(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        size_t k = 0;
        for (; k < width && i + 1 + k < body.size() && HexValue(body[i + 1 + k]) >= 0; ++k) {
          cp = cp * 16 + HexValue(body[i + 1 + k]);
        }
        if (k != width) {
          out += '\\';
          out += e;
        } else {
          AppendUtf8(cp, &out);
          i += width;
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + (body[++i] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& origin)
      : src_(std::move(source)), origin_(origin) {}

  std::vector<Token> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos_), line_);
        Advance(src_.size());
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      size_t raw_body = kind == '%' ? MatchRawBegin(tag + 2 + (sign ? 1 : 0)) : 0;
      EmitText(pos_, tag, sign, kind != '{', line_starting);
      Advance(tag + 2 + (sign ? 1 : 0));
      if (raw_body != 0) {
        Advance(raw_body);
        line_starting = LexRaw();
      } else if (kind == '#') {
        line_starting = LexComment();
      } else {
        line_starting = LexTag(kind == '{');
      }
    }
    tokens_.push_back({TokenType::kEof, line_, ""});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void Fail(const std::string& message) {
    ThrowInvalidArgument(origin_ + ":" + std::to_string(line_) + ": syntax error: " + message);
  }

  void Emit(TokenType type, std::string text, int line) {
    tokens_.push_back({type, line, std::move(text)});
  }

  void Advance(size_t to) {
    for (size_t i = pos_; i < to; ++i) line_ += src_[i] == '\n';
    pos_ = to;
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // If `{%` at p-2.. is `{% raw %}`, returns the offset just past it; else 0.
  size_t MatchRawBegin(size_t p) const {
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) return 0;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  // Emits src_[begin, end) as data after whitespace control for a tag with `sign`.
  void EmitText(size_t begin, size_t end, char sign, bool lstrip_applies, bool line_starting) {
    std::string_view text(src_.data() + begin, end - begin);
    if (sign == '-') {
      size_t n = text.size();
      while (n > 0 && IsSpace(text[n - 1])) --n;
      text = text.substr(0, n);
    } else if (sign != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool all_space = l_pos < text.size();
        for (size_t i = l_pos; i < text.size(); ++i) all_space &= IsSpace(text[i]);
        if (all_space) text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Emit(TokenType::kData, std::string(text), line_);
  }

  // After `-X}`: skips whitespace; after `X}` with trim_blocks: one newline.
  // Returns whether the consumed end ended with a newline (jinja2's line_starting).
  bool ConsumeEnd(size_t after_end, char sign, bool trim_newline) {
    size_t p = after_end;
    if (sign == '-') {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
    } else if (sign != '+' && trim_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    Advance(p);
    return p > 0 && src_[p - 1] == '\n';
  }

  bool LexComment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Fail("missing end of comment tag");
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    return ConsumeEnd(end + 2, sign, true);
  }

  bool LexRaw() {
    for (size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : '\0';
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      char end_sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      EmitText(pos_, p, sign, true, false);
      Advance(q + 2);
      return ConsumeEnd(q + 2, end_sign, true);
    }
    Fail("missing end of raw directive");
  }

  // Lexes the inside of `{{ ... }}` or `{% ... %}`; pos_ is just past the begin.
  bool LexTag(bool is_var) {
    Emit(is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_);
    std::string balance;
    while (true) {
      if (pos_ >= src_.size()) {
        Fail(std::string("unexpected end of template, expected '") + (is_var ? "}}" : "%}") + "'");
      }
      if (balance.empty()) {
        if (is_var) {
          if (src_.compare(pos_, 3, "-}}") == 0) {
            Emit(TokenType::kVarEnd, "", line_);
            return ConsumeEnd(pos_ + 3, '-', false);
          }
          if (src_.compare(pos_, 2, "}}") == 0) {
            Emit(TokenType::kVarEnd, "", line_);
            return ConsumeEnd(pos_ + 2, '\0', false);
          }
        } else {
          for (char sign : {'+', '-'}) {
            if (src_[pos_] == sign && src_.compare(pos_ + 1, 2, "%}") == 0) {
              Emit(TokenType::kBlockEnd, "", line_);
              return ConsumeEnd(pos_ + 3, sign, true);
            }
          }
          if (src_.compare(pos_, 2, "%}") == 0) {
            Emit(TokenType::kBlockEnd, "", line_);
            return ConsumeEnd(pos_ + 2, '\0', true);
          }
        }
      }
      LexExpressionToken(&balance);
    }
  }

  void LexExpressionToken(std::string* balance) {
    char c = src_[pos_];
    if (IsSpace(c)) {
      size_t p = pos_;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      Advance(p);
      return;
    }
    if (IsDigit(c)) return LexNumber();
    if (IsNameStart(c)) {
      size_t p = pos_;
      while (p < src_.size() && IsNameChar(src_[p])) ++p;
      Emit(TokenType::kName, src_.substr(pos_, p - pos_), line_);
      Advance(p);
      return;
    }
    if (c == '\'' || c == '"') {
      size_t p = pos_ + 1;
      while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
      if (p >= src_.size()) Fail("unterminated string");
      Emit(TokenType::kString, Unescape(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1)),
           line_);
      Advance(p + 1);
      return;
    }
    static const char* kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(pos_, 2, op) == 0) {
        Emit(TokenType::kOperator, op, line_);
        Advance(pos_ + 2);
        return;
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr) {
      Fail(std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) Fail(std::string("unexpected '") + c + "'");
      if (balance->back() != c) {
        Fail(std::string("unexpected '") + c + "', expected '" + balance->back() + "'");
      }
      balance->pop_back();
    }
    Emit(TokenType::kOperator, std::string(1, c), line_);
    Advance(pos_ + 1);
  }

  void LexNumber() {
    size_t p = pos_;
    auto digits = [&](size_t q, bool (*ok)(char)) {
      while (q < src_.size() && (ok(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() &&
                                                  ok(src_[q + 1])))) {
        ++q;
      }
      return q;
    };
    std::string text;
    auto strip = [](std::string_view s) {
      std::string r;
      for (char ch : s) if (ch != '_') r += ch;
      return r;
    };
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("xXoObB", src_[p + 1]) != nullptr &&
        src_[p + 1] != '\0') {
      char base_char = src_[p + 1] | 0x20;
      int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      size_t q = p + 2;
      if (q < src_.size() && src_[q] == '_') ++q;
      size_t end = digits(q, [](char ch) { return HexValue(ch) >= 0; });
      std::string body = strip(std::string_view(src_).substr(q, end - q));
      int64_t v = 0;
      for (char ch : body) {
        if (HexValue(ch) >= base) Fail("invalid number literal");
        v = v * base + HexValue(ch);
      }
      Emit(TokenType::kInt, std::to_string(v), line_);
      Advance(end);
      return;
    }
    size_t end = digits(p, IsDigit);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && IsDigit(src_[end + 1])) {
      end = digits(end + 1, IsDigit);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t q = end + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        end = digits(q, IsDigit);
        is_float = true;
      }
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInt,
         strip(std::string_view(src_).substr(p, end - p)), line_);
    Advance(end);
  }

  std::string src_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const std::string& origin) {
  return Lexer(NormalizeSource(source), origin).Run();
}

}  // namespace pagoda::jinja
