#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {
namespace {

BpeModelOptions ModelOptions(const BpeTokenizerConfig& c) {
  BpeModelOptions o = c.model_options;
  o.ignore_merges = o.ignore_merges || c.ignore_merges;
  return o;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeTokenizerConfig config)
    : config_(std::move(config)), model_(config_.pieces, config_.merges, ModelOptions(config_)) {
  const int64_t n = static_cast<int64_t>(config_.pieces.size());
  const std::string& src = config_.source;
  PAGODA_ENSURE(n > 0, ErrorCode::kCorruptData, src << ": the vocabulary is empty");
  PAGODA_ENSURE(n < (int64_t{1} << 31), ErrorCode::kCorruptData, src << ": too many tokens");
  if (config_.types.empty()) config_.types.assign(n, TokenType::kNormal);
  PAGODA_ENSURE(static_cast<int64_t>(config_.types.size()) == n, ErrorCode::kCorruptData,
                src << ": " << config_.types.size() << " token types for " << n << " tokens");
  auto check = [&](int32_t id, const char* what) {
    PAGODA_ENSURE(id >= -1 && id < n, ErrorCode::kCorruptData,
                  src << ": " << what << " id " << id << " is outside the vocabulary of " << n);
  };
  check(config_.bos_id, "BOS");
  check(config_.model_options.unk_id, "unknown-token");
  for (int32_t id : config_.eos_ids) check(id, "EOS");
  for (int32_t id : config_.prefix_ids) check(id, "post-processor");
  for (int32_t id : config_.suffix_ids) check(id, "post-processor");
  special_.assign(n, false);
  for (int64_t i = 0; i < n; ++i) {
    special_[i] =
        config_.types[i] == TokenType::kControl || config_.types[i] == TokenType::kUnknown;
  }
  for (const AddedToken& t : config_.added_tokens) {
    check(t.id, "added token");
    PAGODA_ENSURE(t.id >= 0, ErrorCode::kCorruptData,
                  src << ": added token \"" << t.content << "\" has no id");
    if (t.special) special_[t.id] = true;
    SpecialToken s;
    s.content = t.content;
    s.id = t.id;
    s.needs_parse_special = t.special;
    s.lstrip = t.lstrip;
    s.rstrip = t.rstrip;
    added_.Add(std::move(s));
  }
}

bool BpeTokenizer::add_bos() const {
  return config_.bos_id >= 0 && !config_.prefix_ids.empty() &&
         config_.prefix_ids.front() == config_.bos_id;
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

std::string BpeTokenizer::TokenPiece(int32_t id) const {
  PAGODA_ENSURE(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                "token id " << id << " is outside the vocabulary of " << vocab_size());
  return config_.pieces[id];
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text,
                                          const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (options.add_special_tokens) out = config_.prefix_ids;
  bool first = true;
  std::vector<std::string> pieces;
  for (const TextFragment& f : added_.Split(text, options.parse_special)) {
    if (f.token_id >= 0) {
      out.push_back(f.token_id);
      first = false;
      continue;
    }
    std::string normalized(f.text);
    for (const auto& n : config_.normalizers) normalized = n->Apply(std::move(normalized));
    pieces.assign(1, std::move(normalized));
    for (const auto& p : config_.pre_tokenizers) p->Apply(&pieces, first);
    for (const std::string& piece : pieces) model_.Encode(piece, &out);
    first = false;
  }
  if (options.add_special_tokens) {
    out.insert(out.end(), config_.suffix_ids.begin(), config_.suffix_ids.end());
  }
  return out;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  // GGUF: added tokens (control, user-defined) are emitted as they are and only the
  // pieces between them go through the decoders (llama.cpp's token_to_piece).
  std::string out;
  std::vector<std::string> pieces;
  auto flush = [&] {
    for (const auto& d : config_.decoders) d->DecodeChain(&pieces);
    for (const std::string& p : pieces) out.append(p);
    pieces.clear();
  };
  for (int32_t id : ids) {
    PAGODA_ENSURE(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                  "token id " << id << " is outside the vocabulary of " << vocab_size());
    if (skip_special && special_[id]) continue;
    TokenType type = config_.types[id];
    if (config_.decoders.empty()) {  // HF without a decoder: pieces joined by ' '
      if (!out.empty()) out.push_back(' ');
      out.append(config_.pieces[id]);
      continue;
    }
    if (!config_.added_tokens_through_decoders &&
        (type == TokenType::kControl || type == TokenType::kUserDefined)) {
      flush();
      out.append(config_.pieces[id]);
      continue;
    }
    pieces.push_back(config_.pieces[id]);
  }
  flush();
  return out;
}

}  // namespace pagoda
