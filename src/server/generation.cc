#include "server/generation.h"

namespace pagoda {

namespace {

ordered_json ToolCallJson(const ToolCall& call) {
  return ordered_json{{"id", call.id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// The text_offset after the last token of a completions logprobs object.
int64_t NextOffset(const ordered_json& lp, int64_t current) {
  const ordered_json& offsets = lp["text_offset"];
  if (offsets.empty()) return current;
  return offsets.back().get<int64_t>() +
         static_cast<int64_t>(lp["tokens"].back().get<std::string>().size());
}

}  // namespace

void Generation::Init(int64_t num_choices) {
  choices_.clear();
  choices_.resize(static_cast<size_t>(num_choices));
  for (Choice& c : choices_) {
    if (tool_format != nullptr) c.tools = std::make_unique<ToolCallStream>(*tool_format);
  }
  cached_tokens_.assign(prompt_lens.size(), 0);
}

void Generation::Apply(const ChoiceOutput& o) {
  ChoiceState& c = choices_[o.choice].state;
  const RequestOutput& out = o.output;
  c.text += out.new_text;
  c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), out.prompt_logprobs.begin(),
                           out.prompt_logprobs.end());
  if (out.finished) c.finish_reason = out.finish_reason;
  const int64_t prompt = o.choice / n;
  cached_tokens_[prompt] = std::max(cached_tokens_[prompt], out.num_cached_tokens);
}

ordered_json Generation::UsageJson() const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (int64_t len : prompt_lens) prompt += len;
  for (int64_t c : cached_tokens_) cached += c;
  for (const Choice& c : choices_) completion += static_cast<int64_t>(c.state.token_ids.size());
  return Usage(prompt, completion, cached);
}

ordered_json Generation::Envelope(const char* object) const {
  return ordered_json{{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

ordered_json Generation::ChunkOf(int64_t choice, ordered_json delta_or_text, ordered_json logprobs,
                                 FinishReason finish, bool tool_calls_finish) const {
  ordered_json ch = {{"index", choice}};
  ch[chat ? "delta" : "text"] = std::move(delta_or_text);
  ch["logprobs"] = std::move(logprobs);
  ch["finish_reason"] = tool_calls_finish ? ordered_json("tool_calls") : FinishReasonJson(finish);
  if (!chat) ch["stop_reason"] = nullptr;
  ordered_json chunk = Envelope(chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = ordered_json::array({std::move(ch)});
  return chunk;
}

std::vector<ordered_json> Generation::ChatChunks(const ChoiceOutput& o, Choice& c,
                                                 ordered_json lp) {
  const RequestOutput& out = o.output;
  std::string content = out.new_text;
  std::vector<ToolCall> calls;
  int64_t first_index = 0;
  if (c.tools) {
    ToolCallDelta d = c.tools->Add(out.new_text);
    content = std::move(d.content);
    calls = std::move(d.calls);
    first_index = d.first_index;
    if (out.finished) {
      ToolCallDelta e = c.tools->Finish();
      content += e.content;
      if (calls.empty()) first_index = e.first_index;
      for (ToolCall& call : e.calls) calls.push_back(std::move(call));
    }
  }
  std::vector<ordered_json> chunks;
  ordered_json delta = ordered_json::object();
  if (!c.started) delta["role"] = "assistant";
  if (!content.empty()) {
    delta["content"] = content;
  } else if (!c.started) {
    delta["content"] = calls.empty() ? ordered_json("") : ordered_json(nullptr);
  }
  if (!delta.empty() || calls.empty()) {
    chunks.push_back(ChunkOf(o.choice, std::move(delta), lp, FinishReason::kNone, false));
    lp = nullptr;
  }
  // Each call: its id and name first, then its arguments (OpenAI's streamed tool calls).
  for (size_t i = 0; i < calls.size(); ++i) {
    const int64_t index = first_index + static_cast<int64_t>(i);
    ordered_json head = {{"index", index},
                         {"id", calls[i].id},
                         {"type", "function"},
                         {"function", {{"name", calls[i].name}, {"arguments", ""}}}};
    chunks.push_back(ChunkOf(o.choice, {{"tool_calls", ordered_json::array({head})}}, lp,
                             FinishReason::kNone, false));
    lp = nullptr;
    ordered_json args = {{"index", index}, {"function", {{"arguments", calls[i].arguments}}}};
    chunks.push_back(ChunkOf(o.choice, {{"tool_calls", ordered_json::array({args})}}, nullptr,
                             FinishReason::kNone, false));
  }
  if (out.finished) {
    const bool tool_finish = c.tools && c.tools->num_calls() > 0;
    chunks.back()["choices"][0]["finish_reason"] =
        tool_finish ? ordered_json("tool_calls") : FinishReasonJson(out.finish_reason);
  }
  return chunks;
}

std::vector<ordered_json> Generation::Chunks(const ChoiceOutput& o) {
  const RequestOutput& out = o.output;
  Choice& c = choices_[o.choice];
  std::vector<ordered_json> chunks;
  if (out.new_token_ids.empty() && out.new_text.empty() && !out.finished) {
    Apply(o);
    return chunks;
  }
  const bool first = !c.started;
  const int64_t prompt = o.choice / n;
  if (chat) {
    ordered_json lp =
        want_logprobs ? ChatLogprobs(tokenizer, out.new_logprobs) : ordered_json(nullptr);
    chunks = ChatChunks(o, c, std::move(lp));
    if (want_prompt_logprobs && first && o.choice == 0) {
      chunks.front()["prompt_logprobs"] = PromptLogprobsJson(tokenizer, out.prompt_logprobs);
    }
  } else {
    std::string text = out.new_text;
    if (echo && first) text = prompt_texts[prompt] + text;
    ordered_json lp = nullptr;
    if (want_logprobs) {
      lp = echo && first ? EchoCompletionLogprobs(tokenizer, first_prompt_ids[prompt],
                                                  out.prompt_logprobs, out.new_logprobs)
                         : CompletionLogprobs(tokenizer, out.new_logprobs, c.lp_offset);
      c.lp_offset = NextOffset(lp, c.lp_offset);
    }
    ordered_json chunk = ChunkOf(o.choice, text, std::move(lp), out.finish_reason, false);
    if (want_prompt_logprobs && first) {
      chunk["choices"][0]["prompt_logprobs"] = PromptLogprobsJson(tokenizer, out.prompt_logprobs);
    }
    chunks.push_back(std::move(chunk));
  }
  if (return_token_ids && !chunks.empty()) {
    ordered_json& ch = chunks.front()["choices"][0];
    if (first) ch["prompt_token_ids"] = prompt_ids[prompt];
    ch["token_ids"] = out.new_token_ids;
  }
  c.started = true;
  Apply(o);
  return chunks;
}

ordered_json Generation::Response() const {
  ordered_json r = Envelope(chat ? "chat.completion" : "text_completion");
  ordered_json arr = ordered_json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i].state;
    const int64_t prompt = static_cast<int64_t>(i) / n;
    ordered_json choice = {{"index", i}};
    ordered_json finish = FinishReasonJson(c.finish_reason);
    if (chat) {
      ordered_json message = {{"role", "assistant"}, {"content", c.text}};
      if (tool_format != nullptr) {
        ParsedToolCalls parsed = ParseToolCalls(*tool_format, c.text);
        if (!parsed.calls.empty()) {
          message["content"] =
              parsed.content.empty() ? ordered_json(nullptr) : ordered_json(parsed.content);
          ordered_json calls = ordered_json::array();
          for (const ToolCall& call : parsed.calls) calls.push_back(ToolCallJson(call));
          message["tool_calls"] = std::move(calls);
          finish = "tool_calls";
        }
      }
      choice["message"] = std::move(message);
      choice["logprobs"] =
          want_logprobs ? ChatLogprobs(tokenizer, c.logprobs) : ordered_json(nullptr);
    } else {
      const std::string prefix = echo ? prompt_texts[prompt] : std::string();
      choice["text"] = prefix + c.text;
      if (!want_logprobs) {
        choice["logprobs"] = nullptr;
      } else if (echo) {
        choice["logprobs"] = EchoCompletionLogprobs(tokenizer, first_prompt_ids[prompt],
                                                    c.prompt_logprobs, c.logprobs);
      } else {
        choice["logprobs"] = CompletionLogprobs(tokenizer, c.logprobs, 0);
      }
      if (want_prompt_logprobs)
        choice["prompt_logprobs"] = PromptLogprobsJson(tokenizer, c.prompt_logprobs);
    }
    choice["finish_reason"] = std::move(finish);
    if (!chat) choice["stop_reason"] = nullptr;
    if (return_token_ids) {
      choice["prompt_token_ids"] = prompt_ids[prompt];
      choice["token_ids"] = c.token_ids;
    }
    arr.push_back(std::move(choice));
  }
  r["choices"] = std::move(arr);
  if (chat && want_prompt_logprobs && !choices_.empty()) {
    r["prompt_logprobs"] = PromptLogprobsJson(tokenizer, choices_[0].state.prompt_logprobs);
  }
  r["usage"] = UsageJson();
  return r;
}

}  // namespace pagoda
