// BpeModel: rank-based BPE over one pre-tokenized word (GPT-2, HF tokenizers'
// models::bpe, llama.cpp's llm_tokenizer_bpe).
//
// The word starts as one symbol per UTF-8 character; the adjacent pair with the
// lowest merge rank is merged (ties: leftmost) until no pair has a rank. Each symbol
// then becomes its vocabulary id; a symbol that is no piece becomes its <0xXX>
// pieces (byte_fallback), else the unknown id (consecutive unknowns fused when
// fuse_unk), else is dropped as llama.cpp does. With ignore_merges a word that is a
// piece as a whole is emitted directly (Llama 3).
// Immutable after construction; Encode is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/string_hash.h"

namespace pagoda {

struct BpeModelOptions {
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
};

class BpeModel {
 public:
  // `pieces[id]` is the vocabulary (empty strings are holes); `merges` in rank
  // order. Merges whose halves or result are not pieces are skipped, as llama.cpp
  // does. Throws kCorruptData naming `source` for duplicate-free violations that
  // would make ids ambiguous (none today; kept for future checks).
  BpeModel(const std::vector<std::string>& pieces,
           const std::vector<std::pair<std::string, std::string>>& merges,
           const BpeModelOptions& options);

  void Encode(std::string_view word, std::vector<int32_t>* out) const;

  int32_t PieceId(std::string_view piece) const;  // -1 when absent

 private:
  StringMap<int32_t> piece_to_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t byte_ids_[256];
  BpeModelOptions options_;
};

}  // namespace pagoda
