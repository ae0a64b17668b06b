// LoadTokenizerForModel and LoadHfTokenizer: pick the loader for the files a user has.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

// vocab_size from a llama2.c checkpoint header (7 int32; a negative vocab_size
// marks an unshared classifier).
int64_t Llama2cVocabSize(const std::string& model_path) {
  std::ifstream in(model_path, std::ios::binary);
  int32_t header[7] = {};
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  PAGODA_ENSURE(in.gcount() == sizeof(header), ErrorCode::kCorruptData,
                model_path << ": too short for a llama2.c header");
  int64_t v = header[5];
  return v < 0 ? -v : v;
}

std::unique_ptr<Tokenizer> LoadTokenizerFile(const std::string& path, int64_t vocab_size) {
  PAGODA_ENSURE(fs::exists(path), ErrorCode::kNotFound, path << ": tokenizer file not found");
  if (fs::is_directory(path)) return LoadHfTokenizer(path);
  if (EndsWith(path, ".json")) {
    fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
    nlohmann::json cfg = ReadTokenizerConfig(config.string());
    return LoadTokenizerJson(path, cfg.is_null() ? nullptr : &cfg);
  }
  if (EndsWith(path, ".model")) {
    fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
    nlohmann::json cfg = ReadTokenizerConfig(config.string());
    return LoadSentencePieceModel(path, cfg.is_null() ? nullptr : &cfg);
  }
  if (HasGgufMagic(path)) {
    GgufFile gguf(path);
    return LoadGgufTokenizer(gguf);
  }
  return LoadLlama2cTokenizer(path, vocab_size);
}

}  // namespace

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& dir) {
  fs::path base(dir);
  nlohmann::json cfg = ReadTokenizerConfig((base / "tokenizer_config.json").string());
  const nlohmann::json* cfg_ptr = cfg.is_null() ? nullptr : &cfg;
  if (fs::exists(base / "tokenizer.json")) {
    return LoadTokenizerJson((base / "tokenizer.json").string(), cfg_ptr);
  }
  if (fs::exists(base / "tokenizer.model")) {
    return LoadSentencePieceModel((base / "tokenizer.model").string(), cfg_ptr);
  }
  (ErrorBuilder(ErrorCode::kNotFound)
   << dir << ": no tokenizer.json or tokenizer.model in this model directory")
      .Raise();
}

std::unique_ptr<Tokenizer> LoadTokenizerForModel(const std::string& model_path,
                                                 const std::string& tokenizer_path,
                                                 int64_t vocab_size) {
  const bool is_llama2c = EndsWith(model_path, ".bin") && !fs::is_directory(model_path);
  if (!tokenizer_path.empty()) {
    if (is_llama2c && vocab_size <= 0 && fs::exists(model_path)) {
      vocab_size = Llama2cVocabSize(model_path);
    }
    return LoadTokenizerFile(tokenizer_path, vocab_size);
  }
  if (model_path.rfind("dummy:", 0) == 0) return nullptr;
  PAGODA_ENSURE(fs::exists(model_path), ErrorCode::kNotFound, model_path << ": model not found");
  if (fs::is_directory(model_path)) return LoadHfTokenizer(model_path);
  if (is_llama2c) {
    // run.c's default: tokenizer.bin next to the checkpoint.
    fs::path guess = fs::path(model_path).parent_path() / "tokenizer.bin";
    PAGODA_ENSURE(fs::exists(guess), ErrorCode::kInvalidArgument,
                  model_path << ": a llama2.c model needs --tokenizer PATH (a tok*.bin)");
    return LoadLlama2cTokenizer(guess.string(),
                                vocab_size > 0 ? vocab_size : Llama2cVocabSize(model_path));
  }
  if (HasGgufMagic(model_path)) {
    GgufFile gguf(model_path);
    return LoadGgufTokenizer(gguf);
  }
  (ErrorBuilder(ErrorCode::kUnsupported)
   << model_path << ": not a GGUF file, a llama2.c .bin or a Hugging Face directory")
      .Raise();
}

}  // namespace pagoda
