// Chat glue: finds a model's chat template (tokenizer_config.json `chat_template` or
// chat_template.jinja in a Hugging Face directory, GGUF `tokenizer.chat_template`, or a
// --chat-template file) and renders a conversation into a prompt with it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct ChatTemplateSource {
  std::string source;  // empty: the model has none
  std::string origin;  // where it came from, for error messages
};

// The template shipped with a --model path (a .gguf file or a Hugging Face directory);
// empty for other formats and models without one. tokenizer_config.json's
// `chat_template` may be a string or a list of {name, template} (the "default" one is
// used). Throws pagoda::Error when a file exists but is malformed.
ChatTemplateSource LoadChatTemplateSource(const std::string& model_path);
// A --chat-template FILE. Throws kNotFound naming the file.
ChatTemplateSource ReadChatTemplateFile(const std::string& path);

// Renders conversations for one model. Thread-safe after construction.
class ChatRenderer {
 public:
  // `source` empty: no template (Render throws ApiError 400). `tokenizer` may be null.
  // Throws pagoda::Error on a template that does not parse.
  ChatRenderer(const ChatTemplateSource& source, const Tokenizer* tokenizer);

  bool has_template() const { return template_.has_value(); }
  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }  // the template text; empty: none
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // The prompt text. Template errors (raise_exception included) are ApiError(400).
  std::string Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra_context) const;

 private:
  std::optional<ChatTemplate> template_;
  std::string origin_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace pagoda
