// Token types shared by every vocabulary source. The numbering is sentencepiece's
// (ModelProto.SentencePiece.Type) and GGUF's `tokenizer.ggml.token_type`.
#pragma once

#include <cstdint>

namespace pagoda {

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, ...: never produced from plain text
  kUserDefined = 4,  // always matched as a whole in the text
  kUnused = 5,
  kByte = 6,  // <0xXX> byte-fallback pieces
};

// Maps a stored integer to a TokenType; values outside 0..6 become kNormal
// (llama.cpp does the same for unknown types).
inline TokenType TokenTypeFromInt(int64_t v) {
  return v >= 0 && v <= 6 ? static_cast<TokenType>(v) : TokenType::kNormal;
}

}  // namespace pagoda
