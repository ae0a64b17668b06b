#include "server/chat.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/gguf_file.h"
#include "server/openai_api.h"

namespace pagoda {

namespace {

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ChatTemplateSource LoadChatTemplateSource(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    const fs::path dir(model_path);
    const fs::path config = dir / "tokenizer_config.json";
    std::string text;
    if (ReadFile(config, &text)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        ThrowCorrupt(config.string() + ": malformed JSON: " + e.what());
      }
      auto it = j.find("chat_template");
      if (it != j.end() && it->is_string()) return {it->get<std::string>(), config.string()};
      if (it != j.end() && it->is_array()) {
        for (const auto& t : *it) {
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
              t["template"].is_string()) {
            return {t["template"].get<std::string>(), config.string() + " (default)"};
          }
        }
        ThrowCorrupt(config.string() + ": chat_template is a list without a \"default\" entry");
      }
    }
    const fs::path jinja = dir / "chat_template.jinja";
    if (ReadFile(jinja, &text)) return {text, jinja.string()};
    return {};
  }
  if (EndsWith(model_path, ".gguf") && fs::is_regular_file(model_path, ec)) {
    GgufFile gguf(model_path);
    return {gguf.GetString("tokenizer.chat_template", ""),
            model_path + " (tokenizer.chat_template)"};
  }
  return {};
}

ChatTemplateSource ReadChatTemplateFile(const std::string& path) {
  std::string text;
  PAGODA_ENSURE(ReadFile(path, &text), ErrorCode::kNotFound,
                "--chat-template " << path << ": cannot read the file");
  return {text, path};
}

ChatRenderer::ChatRenderer(const ChatTemplateSource& source, const Tokenizer* tokenizer)
    : origin_(source.origin), source_(source.source) {
  if (!source.source.empty()) template_ = ChatTemplate::Parse(source.source, source.origin);
  if (tokenizer != nullptr) {
    if (tokenizer->bos_id() >= 0) bos_token_ = tokenizer->TokenPiece(tokenizer->bos_id());
    const std::vector<int32_t> eos = tokenizer->eos_ids();
    if (!eos.empty()) eos_token_ = tokenizer->TokenPiece(eos[0]);
  }
}

std::string ChatRenderer::Render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_context) const {
  if (!template_) {
    throw ApiError(
        400,
        "this model has no chat template (no tokenizer_config.json chat_template or GGUF "
        "tokenizer.chat_template); start the server with --chat-template FILE",
        "messages");
  }
  try {
    return template_->Render(messages, tools, add_generation_prompt, bos_token_, eos_token_,
                             extra_context);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, std::string("chat template: ") + e.what(), "messages");
  }
}

}  // namespace pagoda
