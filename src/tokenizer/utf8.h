// Small UTF-8 helpers for the tokenizers. Invalid input never reads out of bounds:
// a bad lead byte counts as a one-byte sequence, and a truncated sequence at the
// end of a buffer is cut to what is there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

// Length of the UTF-8 sequence that starts with `lead` (1 for invalid leads).
inline size_t Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the character at `pos`, capped at what remains of `text`.
inline size_t Utf8CharLength(std::string_view text, size_t pos) {
  size_t n = Utf8SequenceLength(static_cast<uint8_t>(text[pos]));
  return n < text.size() - pos ? n : text.size() - pos;
}

// Appends the UTF-8 encoding of a code point (<= 0x10FFFF).
void AppendUtf8(uint32_t code_point, std::string* out);

// Decodes the code point at `pos` (U+FFFD for an invalid sequence); sets *length.
uint32_t DecodeUtf8(std::string_view text, size_t pos, size_t* length);

// Number of leading bytes of `text` that end on a complete UTF-8 character: an
// incomplete sequence at the very end (that more bytes could complete) is excluded;
// invalid bytes elsewhere count as complete (they will never become valid).
size_t CompleteUtf8Prefix(std::string_view text);

}  // namespace pagoda
