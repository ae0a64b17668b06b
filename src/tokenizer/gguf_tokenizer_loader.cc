// Tokenizers from GGUF metadata (llama.cpp's `tokenizer.ggml.*` keys):
//   model "llama" -> SpmTokenizer (tokens, scores, token_type)
//   model "gpt2"  -> BpeTokenizer (tokens, token_type, merges, pre)
#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "core/error.h"
#include "io/gguf_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pre_tokenizer_presets.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

// Reads an optional token id; -1 when stored as "none" (0xFFFFFFFF, -1), the
// llama.cpp default when absent (if it is inside the vocabulary).
int32_t OptionalId(const GgufFile& gguf, const std::string& key, int64_t fallback,
                   size_t num_tokens) {
  if (!gguf.Has(key))
    return fallback >= 0 && fallback < static_cast<int64_t>(num_tokens) ? fallback : -1;
  int64_t v = gguf.GetInt(key);
  if (v < 0 || v == 0xFFFFFFFFLL) return -1;
  PAGODA_ENSURE(v < static_cast<int64_t>(num_tokens), ErrorCode::kCorruptData,
                gguf.path() << ": " << key << " = " << v << " is outside the vocabulary of "
                            << num_tokens << " tokens");
  return static_cast<int32_t>(v);
}

std::vector<TokenType> ReadTypes(const GgufFile& gguf, size_t n) {
  std::vector<TokenType> types(n, TokenType::kNormal);
  if (!gguf.Has("tokenizer.ggml.token_type")) return types;
  std::vector<int64_t> raw = gguf.GetIntArray("tokenizer.ggml.token_type");
  PAGODA_ENSURE(raw.size() == n, ErrorCode::kCorruptData,
                gguf.path() << ": tokenizer.ggml.token_type has " << raw.size() << " entries for "
                            << n << " tokens");
  for (size_t i = 0; i < n; ++i) types[i] = TokenTypeFromInt(raw[i]);
  return types;
}

// EOS plus the end-of-turn tokens generation should also stop at.
std::vector<int32_t> EndOfGenerationIds(const GgufFile& gguf,
                                        const std::vector<std::string>& tokens,
                                        const std::vector<TokenType>& types, int64_t eos_default) {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  add(OptionalId(gguf, "tokenizer.ggml.eos_token_id", eos_default, tokens.size()));
  add(OptionalId(gguf, "tokenizer.ggml.eot_token_id", -1, tokens.size()));
  add(OptionalId(gguf, "tokenizer.ggml.eom_token_id", -1, tokens.size()));
  static const char* const kEndOfTurn[] = {"<|eot_id|>", "<|eom_id|>",    "<|im_end|>",
                                           "<|end|>",    "<end_of_turn>", "<|end_of_text|>"};
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != TokenType::kControl && types[i] != TokenType::kUserDefined) continue;
    for (const char* t : kEndOfTurn) {
      if (tokens[i] == t) add(static_cast<int32_t>(i));
    }
  }
  return ids;
}

// llama.cpp keys one tokenizer rule on the model's name: Phi-3's special tokens
// swallow the whitespace after them (LLAMA_TOKEN_ATTR_RSTRIP), except <unk>, <s>
// and <|endoftext|>.
std::unordered_set<int32_t> RstripIds(const GgufFile& gguf, const std::vector<std::string>& tokens,
                                      const std::vector<TokenType>& types) {
  std::unordered_set<int32_t> ids;
  std::string name = gguf.GetString("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    bool special = types[i] == TokenType::kControl || types[i] == TokenType::kUserDefined ||
                   types[i] == TokenType::kUnknown || tokens[i] == "</s>";
    if (special && tokens[i] != "<unk>" && tokens[i] != "<s>" && tokens[i] != "<|endoftext|>") {
      ids.insert(static_cast<int32_t>(i));
    }
  }
  return ids;
}

std::unique_ptr<Tokenizer> LoadGgufSpm(const GgufFile& gguf, std::vector<std::string> tokens) {
  const size_t n = tokens.size();
  SpmVocab vocab;
  vocab.source = gguf.path();
  vocab.types = ReadTypes(gguf, n);
  if (gguf.Has("tokenizer.ggml.scores")) {
    std::vector<double> scores = gguf.GetFloatArray("tokenizer.ggml.scores");
    PAGODA_ENSURE(scores.size() == n, ErrorCode::kCorruptData,
                  gguf.path() << ": tokenizer.ggml.scores has " << scores.size() << " entries for "
                              << n << " tokens");
    vocab.scores.assign(scores.begin(), scores.end());
  } else {
    vocab.scores.assign(n, 0.0f);
  }
  vocab.bos_id = OptionalId(gguf, "tokenizer.ggml.bos_token_id", 1, n);
  vocab.unk_id = OptionalId(gguf, "tokenizer.ggml.unknown_token_id", 0, n);
  vocab.eos_ids = EndOfGenerationIds(gguf, tokens, vocab.types, 2);
  vocab.add_bos = gguf.GetBool("tokenizer.ggml.add_bos_token", true);
  vocab.add_eos = gguf.GetBool("tokenizer.ggml.add_eos_token", false);
  vocab.add_space_prefix = gguf.GetBool("tokenizer.ggml.add_space_prefix", true);
  vocab.rstrip_ids = RstripIds(gguf, tokens, vocab.types);
  vocab.pieces = std::move(tokens);
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

std::unique_ptr<Tokenizer> LoadGgufBpe(const GgufFile& gguf, std::vector<std::string> tokens) {
  const size_t n = tokens.size();
  BpeTokenizerConfig config;
  config.source = gguf.path();
  config.types = ReadTypes(gguf, n);
  std::vector<std::string> merges = gguf.GetStringArray("tokenizer.ggml.merges");
  config.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    size_t space = merges[i].find(' ', 1);
    PAGODA_ENSURE(space != std::string::npos, ErrorCode::kCorruptData,
                  gguf.path() << ": tokenizer.ggml.merges[" << i << "] = \"" << merges[i]
                              << "\" is not two pieces separated by a space");
    config.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
  }
  std::string pre = gguf.GetString("tokenizer.ggml.pre", "default");
  for (const std::string& regex : PreTokenizerRegexes(pre, gguf.path())) {
    config.pre_tokenizers.push_back(MakeRegexSplit(regex, SplitBehavior::kIsolated, false));
  }
  config.pre_tokenizers.push_back(MakeByteLevelMap());
  config.decoders.push_back(MakeByteLevelDecoder());
  config.added_tokens_through_decoders = false;
  config.ignore_merges = pre == "llama-bpe" || pre == "llama3";
  config.bos_id = OptionalId(gguf, "tokenizer.ggml.bos_token_id", 11, n);
  config.eos_ids = EndOfGenerationIds(gguf, tokens, config.types, 11);
  bool add_bos = gguf.GetBool("tokenizer.ggml.add_bos_token", false);
  bool add_eos = gguf.GetBool("tokenizer.ggml.add_eos_token", false);
  if (add_bos && config.bos_id >= 0) config.prefix_ids.push_back(config.bos_id);
  if (add_eos && !config.eos_ids.empty()) config.suffix_ids.push_back(config.eos_ids[0]);
  // llama.cpp: control tokens with parse_special, user-defined ones always.
  std::unordered_set<int32_t> rstrip = RstripIds(gguf, tokens, config.types);
  for (size_t i = 0; i < n; ++i) {
    if (config.types[i] == TokenType::kControl || config.types[i] == TokenType::kUserDefined) {
      AddedToken t;
      t.content = tokens[i];
      t.id = static_cast<int32_t>(i);
      t.special = config.types[i] == TokenType::kControl;
      t.rstrip = rstrip.count(static_cast<int32_t>(i)) != 0;
      config.added_tokens.push_back(std::move(t));
    }
  }
  config.pieces = std::move(tokens);
  return std::make_unique<BpeTokenizer>(std::move(config));
}

}  // namespace

std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf) {
  std::string model = gguf.GetString("tokenizer.ggml.model");
  if (model == "no_vocab" || model == "none") return nullptr;
  std::vector<std::string> tokens = gguf.GetStringArray("tokenizer.ggml.tokens");
  PAGODA_ENSURE(!tokens.empty(), ErrorCode::kCorruptData,
                gguf.path() << ": tokenizer.ggml.tokens is empty");
  if (model == "llama") return LoadGgufSpm(gguf, std::move(tokens));
  if (model == "gpt2") return LoadGgufBpe(gguf, std::move(tokens));
  (ErrorBuilder(ErrorCode::kUnsupported)
   << gguf.path() << ": tokenizer.ggml.model \"" << model
   << "\" is not supported (pagoda reads \"llama\" and \"gpt2\" vocabularies)")
      .Raise();
}

}  // namespace pagoda
