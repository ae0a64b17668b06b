// Loaders of the Hugging Face tokenizer files, used by LoadHfTokenizer and
// LoadTokenizerForModel. `tokenizer_config` (tokenizer_config.json, may be null)
// supplies add_bos_token / add_eos_token / bos_token / eos_token and added tokens.
// Each throws pagoda::Error naming the file and the field on bad input.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace pagoda {

// tokenizer.json: model BPE (byte-level or SentencePiece-style), normalizer,
// pre_tokenizer, post_processor, decoder, added_tokens.
std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path,
                                             const nlohmann::json* tokenizer_config);

// tokenizer.model: the sentencepiece ModelProto (BPE models; identity normalizer).
std::unique_ptr<Tokenizer> LoadSentencePieceModel(const std::string& path,
                                                  const nlohmann::json* tokenizer_config);

// Parses tokenizer_config.json when it exists (else returns a null json value).
// Throws kCorruptData naming the file when it is not valid JSON.
nlohmann::json ReadTokenizerConfig(const std::string& path);

// tokenizer_config.json's `key` ("bos_token", "eos_token", ...) as a string: stored
// as a string or as an object with "content". Empty when absent or null.
std::string ConfigTokenName(const nlohmann::json* config, const char* key);
// tokenizer_config.json's boolean `key`; -1 when absent or null, else 0 or 1.
int ConfigBool(const nlohmann::json* config, const char* key);

}  // namespace pagoda
