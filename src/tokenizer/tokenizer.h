// Tokenizer: text <-> token ids, as the reference tokenizers (sentencepiece, HF
// tokenizers, llama.cpp) do it, loaded from the files users have.
//
// Implementations: SentencePiece-style BPE with scores and byte fallback (GGUF `llama`
// vocab, tokenizer.model, llama2.c tok*.bin) and byte-level BPE (GGUF `gpt2` vocab,
// tokenizer.json). Thread-safe for concurrent Encode/Decode after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class GgufFile;

struct EncodeOptions {
  bool add_special_tokens = true;  // BOS/EOS per the model's rules (add_bos_token ...)
  bool parse_special = false;      // match special/added tokens in the text before BPE
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(std::string_view text,
                                      const EncodeOptions& options) const = 0;
  // Text of the ids. skip_special drops control tokens (BOS/EOS...). Bytes that do not
  // form valid UTF-8 are kept as they are (the incremental detokenizer holds them back).
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const = 0;
  // The raw piece of one token as stored in the vocabulary (for debugging and logprobs).
  virtual std::string TokenPiece(int32_t id) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  // End-of-sequence ids (EOS, EOT, ...). May be empty.
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool add_bos() const = 0;  // whether Encode adds BOS with add_special_tokens
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Loaders; each throws pagoda::Error naming the file and the field on bad input.
std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf);
std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int64_t vocab_size);
// A Hugging Face model directory: tokenizer.json, else tokenizer.model, with
// tokenizer_config.json (BOS/EOS rules, added tokens) when present.
std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& dir);

// Picks the loader for a --model argument: a .gguf file, a llama2.c .bin with
// `tokenizer_path` (a tok*.bin), or an HF directory; `tokenizer_path`, when given,
// overrides (a tokenizer.json, tokenizer.model or tok*.bin). Returns nullptr for
// dummy models without a tokenizer.
std::unique_ptr<Tokenizer> LoadTokenizerForModel(const std::string& model_path,
                                                 const std::string& tokenizer_path,
                                                 int64_t vocab_size);

// Turns a stream of ids into text pieces, never emitting half a UTF-8 character and
// handling SentencePiece's leading space the way a full Decode would.
//
// With a prompt, the generated ids continue it (vLLM's prefix/read offsets seeded with
// the prompt's last tokens): what Add/Flush return, concatenated, is
// Decode(prompt + ids) minus Decode(prompt), so a SentencePiece "▁a" right after the
// prompt keeps its space and a client appending the completion to its prompt text gets
// the text of the whole sequence.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = true);
  // `prompt` is copied (its last few ids are all that is kept).
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                         bool skip_special = true);
  // Appends one id; returns the new text that is now final (possibly empty).
  std::string Add(int32_t id);
  // Whatever is held back (an incomplete UTF-8 sequence at the end), as is.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t emitted_bytes_ = 0;  // total bytes returned so far
  // Window [prefix_offset_, end) is decoded each step; [prefix_offset_,
  // read_offset_) is the part whose text was already emitted.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace pagoda
