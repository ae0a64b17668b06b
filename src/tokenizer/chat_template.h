// Chat templates: renders a model's Jinja chat template (tokenizer_config.json
// `chat_template`, GGUF `tokenizer.chat_template`, or --chat-template FILE) the
// way Hugging Face transformers does: jinja2's ImmutableSandboxedEnvironment
// with trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, a
// tojson filter that is json.dumps(x, ensure_ascii=False, indent=, separators=,
// sort_keys=) keeping key order, and the globals messages, tools,
// add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now.
//
// Key order: tojson prints objects in insertion order, so parse requests with
// nlohmann::ordered_json to keep the client's order (a nlohmann::json argument
// converts implicitly, but its keys are already sorted).
//
// Failure: Parse() throws pagoda::Error (kInvalidArgument) with
// "<origin>:<line>: syntax error: ..." for malformed templates. Render() throws
// pagoda::Error: for raise_exception(msg), a jinja::RaisedError whose what() is
// exactly msg (surface it to the client as a 400); for other runtime errors
// "<origin>:<line>: ..." (undefined values used in arithmetic, type errors,
// output larger than the limit, ...).
//
// Thread safety: a parsed ChatTemplate is immutable; Render() may be called
// from many threads at once.
//
// Unsupported (errors, never silent): include/extends/import/block, dict
// literals with non-string keys, integers beyond 64 bits, str.format specs.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/interpreter.h"

namespace pagoda {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // null: the template sees `tools` as none
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // More top-level variables (chat_template_kwargs, e.g. enable_thinking); they
  // override the standard ones of the same name. REQUIRES: an object or null.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // What strftime_now() formats (local time); nullopt = now.
  std::optional<std::time_t> now;
};

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in errors (a file name, "tokenizer_config.json").
  static ChatTemplate Parse(std::string source, std::string origin);

  // Renders the conversation. `tools` null means no tools (transformers' tools=None);
  // an empty array is passed as an empty list, as transformers does.
  std::string Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token,
                     const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object()) const;
  std::string Render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return state_->source; }
  const std::string& origin() const { return state_->origin; }

  // Bounds on one render (output bytes, nesting, steps); defaults suit chat use.
  void set_limits(const jinja::RenderLimits& limits) { state_->limits = limits; }

 private:
  struct State {
    std::string source;
    std::string origin;
    jinja::NodeList nodes;
    jinja::RenderLimits limits;
  };
  explicit ChatTemplate(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace pagoda
