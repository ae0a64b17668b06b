#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<uint32_t, uint8_t> char_to_byte;

  ByteTables() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? b : 256 + extra++;
      AppendUtf8(cp, &byte_to_char[b]);
      char_to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

std::string ByteLevelEncode(std::string_view bytes) {
  const ByteTables& t = Tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(t.byte_to_char[static_cast<uint8_t>(c)]);
  return out;
}

std::string ByteLevelDecode(std::string_view token) {
  const ByteTables& t = Tables();
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    size_t len = 0;
    uint32_t cp = DecodeUtf8(token, pos, &len);
    auto it = t.char_to_byte.find(cp);
    if (it == t.char_to_byte.end() || (cp == 0xFFFD && len == 1)) return std::string(token);
    out.push_back(static_cast<char>(it->second));
    pos += len;
  }
  return out;
}

}  // namespace pagoda
