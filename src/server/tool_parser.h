// Tool-call parsers: a chat model's answer (text) -> OpenAI `tool_calls`, for the formats
// of the common chat templates, under vLLM's --tool-call-parser names:
//
//   hermes        Hermes / Qwen2.5:   <tool_call>{"name": N, "arguments": {...}}</tool_call> ...
//   llama3_json   Llama 3.1 / 3.2:    [<|python_tag|>]{"name": N, "parameters": {...}}[; {...}]
//                                     (the whole answer is the call(s): it starts with `{`)
//   mistral       Mistral / Nemo:     [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
//                                     (and the newer [TOOL_CALLS]N[ARGS]{...})
//   deepseek_v3   DeepSeek V3 / R1:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//                                     ```json {...} ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   deepseek_v31  DeepSeek V3.1:      ...<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
//
// One algorithm serves streamed and whole answers: ToolCallStream takes the text as it is
// generated; text before the format's start marker is content, the rest (the tool-call
// section) is held back and each call goes out once it is complete. A whole answer is the
// same stream fed at once, so streamed and non-streamed responses agree by construction.
// A section that does not parse is never an error: when no call could be parsed, the
// section goes out as content, so the client gets the model's text unchanged; after at
// least one call, unparsable text that follows goes out as content.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct ToolCall {
  std::string id;  // "call_" + 24 hex digits (mistral: 9 letters and digits)
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

// One tool-call format. Stateless; thread-safe.
class ToolCallFormat {
 public:
  virtual ~ToolCallFormat() = default;
  virtual const char* name() const = 0;

  // Where the tool-call section starts in `text` (the answer so far), or npos. With npos,
  // *hold is how many bytes at the end of `text` could still become the start marker (they
  // are not content yet); `final`: no more text comes.
  virtual size_t FindStart(std::string_view text, bool final, size_t* hold) const = 0;

  // Parses the section (text from the start marker on). Appends the complete calls found
  // from the beginning of the section to *calls and sets *consumed to the end of the last
  // one. Returns false once the text after *consumed cannot be (the beginning of) a call
  // in this format; true while it may still become one. With `final`, an incomplete call
  // is a failure (returns false) unless the format allows it (a missing end marker).
  virtual bool ParseSection(std::string_view section, bool final, std::vector<ToolCall>* calls,
                            size_t* consumed) const = 0;

  // A call id in this format's style.
  virtual std::string NewCallId() const;
};

// vLLM's names: hermes, llama3_json, mistral, deepseek_v3, deepseek_v31. nullptr for an
// unknown name.
std::unique_ptr<ToolCallFormat> MakeToolCallFormat(std::string_view name);
// The names, comma-separated, for messages and --help.
std::string ToolCallFormatNames();

// What one piece of text (or the end) adds to a response.
struct ToolCallDelta {
  std::string content;          // new plain text
  std::vector<ToolCall> calls;  // calls that became complete, in order
  int64_t first_index = 0;      // the `index` of calls[0] in the response
};

// The answer of one choice, as it is generated. Not thread-safe.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolCallFormat& format) : format_(format) {}

  ToolCallDelta Add(std::string_view text);
  // The end of the answer: whatever was held back, as calls or content.
  ToolCallDelta Finish();

  int64_t num_calls() const { return num_calls_; }

 private:
  ToolCallDelta Step(bool final);

  const ToolCallFormat& format_;
  std::string text_;        // the whole answer so far
  size_t content_end_ = 0;  // text_[0, content_end_) went out as content
  size_t section_start_ = std::string::npos;
  size_t parsed_end_ = 0;  // within the section: the end of the last call sent
  int64_t num_calls_ = 0;
  bool failed_ = false;  // the section stopped parsing
};

// Parses a whole answer: content (possibly empty) and the calls.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls ParseToolCalls(const ToolCallFormat& format, std::string_view text);

}  // namespace pagoda
