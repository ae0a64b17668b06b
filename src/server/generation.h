// Generation: the response side of one /v1/completions or /v1/chat/completions request.
// It turns the engine's outputs (ChoiceOutput, one per choice and step) into OpenAI's JSON:
// one response document, or SSE chunks as they come (OpenAI's and vLLM's shapes):
//
//   completions  text (echo: prompt text first), logprobs {tokens, token_logprobs,
//                top_logprobs, text_offset} (echo: the prompt's tokens first, the first with
//                null), vLLM's prompt_logprobs per choice
//   chat         message {role, content, tool_calls}, logprobs {content: [...]},
//                finish_reason "tool_calls" when the answer was parsed into calls;
//                streamed tool calls: a delta {index, id, type, function {name, arguments: ""}}
//                then {index, function {arguments}} per call
//
// With a tool-call format (tool_choice other than "none" and --tool-call-parser), each
// choice's text goes through a ToolCallStream; streamed and whole answers give the same
// content and calls (tool_parser.h).
//
// Not thread-safe: one handler thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/async_engine.h"
#include "server/openai_api.h"
#include "server/tool_parser.h"

namespace pagoda {

struct Generation {
  bool chat = false;
  std::string id;
  std::string model;
  int64_t created = 0;
  int64_t n = 1;
  bool include_usage = false;
  bool want_logprobs = false;
  bool echo = false;
  bool want_prompt_logprobs = false;             // vLLM's prompt_logprobs field in the response
  std::vector<std::string> prompt_texts;         // completions' echo
  std::vector<int32_t> first_prompt_ids;         // per prompt: its first token (echo logprobs)
  bool return_token_ids = false;                 // vLLM's prompt_token_ids / token_ids per choice
  std::vector<std::vector<int32_t>> prompt_ids;  // per prompt, when return_token_ids
  std::vector<int64_t> prompt_lens;
  const ToolCallFormat* tool_format = nullptr;  // chat with tool parsing; may be null
  const Tokenizer* tokenizer = nullptr;         // may be null (ids only)
  std::shared_ptr<RequestStream> stream;
  bool done = false;

  // Call after the fields above are set and the stream is known.
  void Init(int64_t num_choices);

  // Applies one output; returns the SSE chunks it makes (empty: nothing to send).
  std::vector<ordered_json> Chunks(const ChoiceOutput& o);
  // Applies one output (non-streaming).
  void Apply(const ChoiceOutput& o);
  // The whole response, after every output was applied.
  ordered_json Response() const;

  ordered_json UsageJson() const;
  ordered_json Envelope(const char* object) const;

 private:
  struct Choice {
    ChoiceState state;
    bool started = false;   // streaming: the first chunk was sent
    int64_t lp_offset = 0;  // streaming: the next logprobs text_offset
    std::unique_ptr<ToolCallStream> tools;
  };
  ordered_json ChunkOf(int64_t choice, ordered_json delta_or_text, ordered_json logprobs,
                       FinishReason finish, bool tool_calls_finish) const;
  std::vector<ordered_json> ChatChunks(const ChoiceOutput& o, Choice& c, ordered_json lp);

  std::vector<Choice> choices_;
  std::vector<int64_t> cached_tokens_;  // per prompt
};

}  // namespace pagoda
