// tokenizer_config.json: the transformers-side BOS/EOS rules.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/tokenizer_loaders.h"

namespace pagoda {

nlohmann::json ReadTokenizerConfig(const std::string& path) {
  if (!std::filesystem::exists(path)) return nullptr;
  std::string text = ReadTextFile(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  PAGODA_ENSURE(!j.is_discarded(), ErrorCode::kCorruptData, path << ": not valid JSON");
  PAGODA_ENSURE(j.is_object(), ErrorCode::kCorruptData, path << ": expected a JSON object");
  return j;
}

std::string ConfigTokenName(const nlohmann::json* config, const char* key) {
  if (config == nullptr || !config->is_object()) return "";
  auto it = config->find(key);
  if (it == config->end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  ThrowCorrupt(std::string("tokenizer_config.json: ") + key +
               " must be a string or an object with \"content\"");
}

int ConfigBool(const nlohmann::json* config, const char* key) {
  if (config == nullptr || !config->is_object()) return -1;
  auto it = config->find(key);
  if (it == config->end() || it->is_null()) return -1;
  if (!it->is_boolean()) {
    ThrowCorrupt(std::string("tokenizer_config.json: ") + key + " must be true or false");
  }
  return it->get<bool>() ? 1 : 0;
}

}  // namespace pagoda
