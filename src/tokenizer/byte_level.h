// GPT-2's byte-level alphabet: every byte maps to one printable Unicode character
// (bytes_to_unicode() in openai/gpt-2's encoder.py), so byte-level BPE pieces are
// valid UTF-8 strings and every byte sequence can be encoded.
#pragma once

#include <string>
#include <string_view>

namespace pagoda {

// Maps each byte of `bytes` to its GPT-2 character (UTF-8 encoded).
std::string ByteLevelEncode(std::string_view bytes);

// Inverse of ByteLevelEncode for one token: when a character of `token` is not in
// the alphabet (an added token's text), the token's own bytes are used unchanged,
// as HF tokenizers' ByteLevel decoder does.
std::string ByteLevelDecode(std::string_view token);

}  // namespace pagoda
