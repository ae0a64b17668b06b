// SpmTokenizer: SentencePiece-style BPE over scored pieces with byte fallback.
//
// Encoding, per plain-text fragment (special tokens are split out first):
//   1. optional dummy prefix " " (add_space_prefix; after BOS/a special token only,
//      as llama.cpp does), then every ' ' becomes U+2581 "▁";
//   2. split into UTF-8 characters; repeatedly merge the adjacent pair whose
//      concatenation is a mergeable piece with the highest score (ties: leftmost);
//   3. each final symbol becomes its piece id; a symbol that is no piece falls back
//      to its bytes' <0xXX> pieces, else to the unknown id. Unused pieces are split
//      back into the two symbols they were merged from (sentencepiece does this).
// This is sentencepiece's BPE model (bpe_model.cc) and llama.cpp's SPM tokenizer;
// llama2.c's run.c (merge the best pair until none is left) gives the same result.
//
// Decoding maps "▁" back to ' ', <0xXX> pieces to raw bytes, and drops the leading
// space of the first text piece (sentencepiece), or in llama2.c mode the leading
// space of the piece right after BOS (run.c).
// Immutable after construction: Encode/Decode are thread-safe.
#pragma once

#include <array>
#include <string>
#include <unordered_set>
#include <vector>

#include "tokenizer/special_token_matcher.h"
#include "tokenizer/string_hash.h"
#include "tokenizer/token_type.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct SpmVocab {
  std::vector<std::string> pieces;  // spaces stored as "▁"
  std::vector<float> scores;        // same size as pieces
  std::vector<TokenType> types;     // same size as pieces
  int32_t bos_id = -1;
  int32_t unk_id = -1;
  std::vector<int32_t> eos_ids;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;
  // sentencepiece's normalizer option: drop leading/trailing spaces and collapse
  // runs of spaces (false for Llama's tokenizer.model and for GGUF vocabularies).
  bool remove_extra_whitespaces = false;
  // llama.cpp: every text fragment after a special token gets the dummy prefix.
  // sentencepiece (tokenizer.model): only the start of the text does.
  bool prefix_after_special = true;
  // Special tokens that swallow the whitespace after them (llama.cpp's RSTRIP).
  std::unordered_set<int32_t> rstrip_ids;
  // llama2.c: every piece may be merged (run.c looks pieces up regardless of type)
  // and Decode strips the leading space only right after BOS.
  bool llama2c_mode = false;
  std::string source;  // file name, for error messages
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Validates the vocabulary (sizes agree, ids in range); throws kCorruptData
  // naming vocab.source otherwise.
  explicit SpmTokenizer(SpmVocab vocab);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const override;
  std::string TokenPiece(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.pieces.size()); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  std::vector<int32_t> eos_ids() const override { return vocab_.eos_ids; }
  bool add_bos() const override { return vocab_.add_bos; }
  bool IsSpecial(int32_t id) const override;

  const SpmVocab& vocab() const { return vocab_; }

 private:
  // Encodes one plain-text fragment whose spaces are already "▁": cuts it at
  // isolating characters, then runs EncodeRun on each part.
  void EncodeFragment(const std::string& text, std::vector<int32_t>* out) const;
  // The BPE merge loop over text[begin, end).
  void EncodeRun(const std::string& text, size_t begin, size_t end,
                 std::vector<int32_t>* out) const;
  void AppendByteFallback(std::string_view symbol, std::vector<int32_t>* out) const;

  SpmVocab vocab_;
  StringMap<int32_t> mergeable_;       // pieces BPE may produce
  std::array<int32_t, 256> byte_ids_;  // <0xXX> ids, -1 if absent
  // ASCII bytes that occur in no mergeable piece longer than one character: no
  // merge can cross them, so the text is encoded run by run between them (exact,
  // and keeps the merge queue small on long inputs such as whole files).
  std::array<bool, 128> isolating_;
  SpecialTokenMatcher specials_;
};

}  // namespace pagoda
