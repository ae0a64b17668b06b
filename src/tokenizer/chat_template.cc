#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace pagoda {

ChatTemplate ChatTemplate::Parse(std::string source, std::string origin) {
  auto state = std::make_shared<State>();
  state->source = std::move(source);
  state->origin = std::move(origin);
  state->nodes =
      jinja::ParseTemplate(jinja::Tokenize(state->source, state->origin), state->origin);
  return ChatTemplate(std::move(state));
}

std::string ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const nlohmann::ordered_json& extra_context) const {
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_token;
  inputs.eos_token = eos_token;
  inputs.extra_context = extra_context;
  return Render(inputs);
}

std::string ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  using jinja::Value;
  PAGODA_ENSURE(inputs.extra_context.is_null() || inputs.extra_context.is_object(),
                ErrorCode::kInvalidArgument,
                state_->origin << ": chat template extra context must be a JSON object");
  jinja::DictData context;
  context.items.reserve(8 + inputs.extra_context.size());
  context.Set("messages", Value::FromJson(inputs.messages));
  context.Set("tools", Value::FromJson(inputs.tools));
  context.Set("add_generation_prompt", Value(inputs.add_generation_prompt));
  context.Set("bos_token", Value(inputs.bos_token));
  context.Set("eos_token", Value(inputs.eos_token));
  if (inputs.extra_context.is_object()) {
    for (auto it = inputs.extra_context.begin(); it != inputs.extra_context.end(); ++it) {
      context.Set(it.key(), Value::FromJson(it.value()));
    }
  }
  jinja::Interpreter interpreter(state_->origin, state_->limits, inputs.now);
  return interpreter.Render(state_->nodes, context);
}

}  // namespace pagoda
