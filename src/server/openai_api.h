// The OpenAI-compatible wire format: request bodies of /v1/completions and
// /v1/chat/completions parsed and validated into RequestSpecs, and the JSON of
// responses, SSE stream chunks, usage, logprobs and errors (OpenAI's and vLLM's field
// names and shapes).
//
// Validation: unknown fields are ignored (as OpenAI-compatible servers do); a known
// field of the wrong type or out of range throws ApiError(400) naming the field in
// `param`. Nothing here touches the engine.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

using ordered_json = nlohmann::ordered_json;

// An error with an HTTP status and the request field it is about (may be empty).
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : Error(status >= 500 ? ErrorCode::kResourceExhausted : ErrorCode::kInvalidArgument, message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }  // e.g. "model_not_found"; may be empty

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// 404 model_not_found for a `model` other than the served one (OpenAI's and vLLM's answer).
[[noreturn]] void ThrowModelNotFound(const std::string& model, const std::string& served);

// The HTTP status for an error: an ApiError's own; kResourceExhausted 503;
// kInternal 500; other pagoda::Errors (bad values, unsupported input) 400.
int HttpStatusFor(const Error& e);
// {"error": {"message", "type", "param", "code"}}, vLLM's shape ("BadRequestError" ...);
// `code` is the status unless given (OpenAI's string codes, e.g. "model_not_found").
ordered_json ErrorBody(int status, const std::string& message, const std::string& param = "",
                       const std::string& code = "");

// What parsing needs to know about the served model.
struct ApiContext {
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  std::string served_model_name;
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  bool has_tool_parser = false;  // --tool-call-parser was given
};

// Fields shared by both endpoints.
struct GenerationRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  RequestSpec base;                   // every field but `prompt`
  std::optional<int64_t> max_tokens;  // max_tokens / max_completion_tokens, when given
  bool return_token_ids = false;      // vLLM's: prompt_token_ids and token_ids per choice
};

struct CompletionRequest : GenerationRequest {
  std::vector<std::vector<int32_t>> prompts;  // tokenized, one per prompt
  std::vector<std::string> prompt_texts;      // the text of each (decoded for id prompts)
  bool echo = false;
  int64_t logprobs = -1;  // `logprobs`: the top k per token; -1: none
  // vLLM's `prompt_logprobs` (the top k at each prompt token); -1: none. echo with
  // logprobs also computes prompt logprobs (base.prompt_logprobs), without this field.
  int64_t prompt_logprobs = -1;
};

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest : GenerationRequest {
  ordered_json messages;  // content parts already joined into strings
  ordered_json tools;     // null when absent
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_choice_name;  // kNamed
  ordered_json chat_template_kwargs = ordered_json::object();
  bool add_generation_prompt = true;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  int64_t prompt_logprobs = -1;  // vLLM's extra parameter
};

// Parses a request body; malformed JSON or a non-object is an ApiError(400).
ordered_json ParseJsonBody(const std::string& body);
// `model` absent or null: fine; another name than the served one: ThrowModelNotFound.
void CheckModel(const ordered_json& body, const ApiContext& ctx);
// `tools` (a list of {"type": "function", "function": {"name", ...}}) and `tool_choice`.
// No tool_choice: "auto" when tools are given and a parser is configured, else "none".
// "auto" without --tool-call-parser, a named function that is not in `tools`, or a
// tool_choice other than "none" without tools is an ApiError(400).
void ParseTools(const ordered_json& body, const ApiContext& ctx, ChatRequest* r);

// Checks `model` against the served name (absent: fine) and parses the common fields.
CompletionRequest ParseCompletionRequest(const ordered_json& body, const ApiContext& ctx);
ChatRequest ParseChatRequest(const ordered_json& body, const ApiContext& ctx);
// The messages of a chat (or /tokenize) body, validated, content parts joined.
ordered_json ParseMessages(const ordered_json& body);

// One RequestSpec per prompt: checks each prompt (non-empty, ids in the vocabulary,
// prompt + max_tokens within max_model_len) and fills the default max_tokens
// (max_model_len - prompt length, as vLLM does).
std::vector<RequestSpec> MakeSpecs(const std::vector<std::vector<int32_t>>& prompts,
                                   const GenerationRequest& req, const ApiContext& ctx);

// ---- responses ----

// Per-choice state accumulated from the stream.
struct ChoiceState {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;  // prompt tokens 1..n-1, when requested
  FinishReason finish_reason = FinishReason::kNone;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
};

std::string NewRequestId(const std::string& prefix);  // "cmpl-" + 24 hex digits
int64_t UnixTime();

// The text of one token for logprobs (special tokens included), as it reads after other
// text: SentencePiece's "▁a" is " a", so the tokens of a completion add up to its text.
std::string TokenText(const Tokenizer* tokenizer, int32_t id);
// Completions' logprobs object: tokens, token_logprobs, top_logprobs, text_offset.
ordered_json CompletionLogprobs(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps,
                                int64_t text_offset);
// The same for echo: the prompt's tokens first (the first with null logprobs, as OpenAI
// and vLLM do), then the generated ones; text offsets run over both from 0.
ordered_json EchoCompletionLogprobs(const Tokenizer* tokenizer, int32_t first_prompt_token,
                                    const std::vector<TokenLogprobs>& prompt_lps,
                                    const std::vector<TokenLogprobs>& lps);
// vLLM's `prompt_logprobs`: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]
// with the prompt token itself and the top k at each position.
ordered_json PromptLogprobsJson(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps);
// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
ordered_json ChatLogprobs(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps);

ordered_json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens = -1);
// "stop" / "length" / "abort"; null while not finished.
ordered_json FinishReasonJson(FinishReason r);

// `data: <json>\n\n` (invalid UTF-8 replaced, never thrown on).
std::string SseEvent(const ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// json.dump() that never throws on invalid UTF-8 (replaces it).
std::string DumpJson(const ordered_json& j);

}  // namespace pagoda
