// BpeTokenizer: the HF tokenizers pipeline around a BpeModel, used for byte-level
// BPE (GGUF `gpt2` vocabularies, tokenizer.json) and for tokenizer.json files of
// SentencePiece-style BPE models (Metaspace / byte_fallback).
//
// Encode: added tokens are split out first (special ones only with parse_special),
// then per plain fragment: normalizers -> pre-tokenizers -> BpeModel per piece;
// with add_special_tokens the post-processor's prefix/suffix ids go around it.
// Decode: ids -> pieces (special ones dropped with skip_special) -> decoders -> text.
// Immutable after construction: thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_token_matcher.h"
#include "tokenizer/token_type.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;  // matched only with parse_special; dropped by skip_special
  bool lstrip = false;
  bool rstrip = false;
};

struct BpeTokenizerConfig {
  std::string source;               // file name, for error messages
  std::vector<std::string> pieces;  // id -> piece; empty for holes
  std::vector<TokenType> types;     // same size as pieces (kNormal when empty)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  bool ignore_merges = false;
  BpeModelOptions model_options;
  std::vector<std::unique_ptr<Normalizer>> normalizers;
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers;
  std::vector<std::unique_ptr<Decoder>> decoders;  // empty: pieces joined with ' ' (HF)
  // HF passes added tokens through the decoders with the rest; llama.cpp emits
  // control and user-defined tokens as they are (GGUF vocabularies).
  bool added_tokens_through_decoders = true;
  std::vector<AddedToken> added_tokens;
  std::vector<int32_t> prefix_ids;  // post-processor ids before the text (BOS ...)
  std::vector<int32_t> suffix_ids;  // and after it (EOS ...)
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws kCorruptData naming config.source when ids are out of range.
  explicit BpeTokenizer(BpeTokenizerConfig config);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const override;
  std::string TokenPiece(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(config_.pieces.size()); }
  int32_t bos_id() const override { return config_.bos_id; }
  std::vector<int32_t> eos_ids() const override { return config_.eos_ids; }
  bool add_bos() const override;
  bool IsSpecial(int32_t id) const override;

 private:
  BpeTokenizerConfig config_;
  BpeModel model_;
  SpecialTokenMatcher added_;
  std::vector<bool> special_;  // per id: dropped by skip_special
};

}  // namespace pagoda
