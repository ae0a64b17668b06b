#include "tokenizer/utf8.h"

namespace pagoda {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t DecodeUtf8(std::string_view text, size_t pos, size_t* length) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  size_t n = Utf8SequenceLength(s[0]);
  if (n == 1) {
    *length = 1;
    return s[0] < 0x80 ? s[0] : 0xFFFD;
  }
  if (n > text.size() - pos) {
    *length = 1;
    return 0xFFFD;
  }
  uint32_t cp = s[0] & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) {
      *length = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  *length = n;
  return cp;
}

size_t CompleteUtf8Prefix(std::string_view text) {
  // Look back at most 3 bytes for the lead byte of the last character.
  size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    auto c = static_cast<uint8_t>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need = Utf8SequenceLength(c);
    if (need == 1 || need <= back) return n;  // ASCII, invalid lead, or complete
    return n - back;                          // incomplete: hold it back
  }
  return n;  // only continuation bytes: invalid, never completes
}

}  // namespace pagoda
