#include "server/tool_parser.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <random>

namespace pagoda {

namespace {

using json = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Whether `s` (the end of the text) could be the beginning of `marker`: a proper prefix.
bool IsPartial(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.compare(0, s.size(), s) == 0;
}

// The longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialSuffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k) {
    if (marker.compare(0, k, text.substr(text.size() - k)) == 0) return k;
  }
  return 0;
}

size_t FindMarker(std::string_view text, std::string_view marker, bool final, size_t* hold) {
  const size_t at = text.find(marker);
  *hold = (at != npos || final) ? 0 : PartialSuffix(text, marker);
  return at;
}

size_t SkipSpace(std::string_view s, size_t p) {
  while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  return p;
}

std::string_view Trim(std::string_view s) {
  size_t b = SkipSpace(s, 0), e = s.size();
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The end (exclusive) of the JSON object or array that starts at s[begin], or npos when
// the text ends first. Brackets inside strings (escapes included) do not count.
size_t JsonValueEnd(std::string_view s, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return npos;
}

bool ParseJson(std::string_view text, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

// Arguments as the model wrote them: an object, or a string holding one (some models).
bool ArgumentsText(const json& v, std::string* out) {
  if (v.is_object()) {
    *out = v.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  }
  if (v.is_string()) {
    json inner;
    if (!ParseJson(v.get<std::string>(), &inner) || !inner.is_object()) return false;
    *out = inner.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  }
  return false;
}

// {"name": N, "arguments" | "parameters": {...}} -> a call.
bool CallFromObject(const json& obj, ToolCall* call) {
  if (!obj.is_object()) return false;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = obj.find("arguments");
  if (args == obj.end()) args = obj.find("parameters");
  call->name = name->get<std::string>();
  if (args == obj.end() || args->is_null()) {
    call->arguments = "{}";
    return true;
  }
  return ArgumentsText(*args, &call->arguments);
}

bool CallFromJsonText(std::string_view text, ToolCall* call) {
  json obj;
  return ParseJson(Trim(text), &obj) && CallFromObject(obj, call);
}

// ---- hermes ----

class HermesFormat : public ToolCallFormat {
 public:
  const char* name() const override { return "hermes"; }
  size_t FindStart(std::string_view text, bool final, size_t* hold) const override {
    return FindMarker(text, kBegin, final, hold);
  }
  bool ParseSection(std::string_view s, bool final, std::vector<ToolCall>* calls,
                    size_t* consumed) const override {
    size_t p = 0;
    while (true) {
      p = SkipSpace(s, p);
      if (p == s.size()) return true;
      if (!StartsWith(s.substr(p), kBegin)) return !final && IsPartial(s.substr(p), kBegin);
      const size_t body = p + kBegin.size();
      const size_t end = s.find(kEnd, body);
      ToolCall call;
      if (end == npos) {
        if (!final) return true;
        // The answer ended without </tool_call> (EOS right after the JSON): vLLM accepts it.
        if (!CallFromJsonText(s.substr(body), &call)) return false;
        calls->push_back(std::move(call));
        *consumed = s.size();
        return true;
      }
      if (!CallFromJsonText(s.substr(body, end - body), &call)) return false;
      calls->push_back(std::move(call));
      p = *consumed = end + kEnd.size();
    }
  }

 private:
  static constexpr std::string_view kBegin = "<tool_call>";
  static constexpr std::string_view kEnd = "</tool_call>";
};

// ---- llama3_json ----

class Llama3JsonFormat : public ToolCallFormat {
 public:
  const char* name() const override { return "llama3_json"; }
  size_t FindStart(std::string_view text, bool final, size_t* hold) const override {
    *hold = 0;
    const size_t p = SkipSpace(text, 0);
    const std::string_view rest = text.substr(p);
    if (StartsWith(rest, "{") || StartsWith(rest, kPythonTag)) return 0;  // the whole answer
    if (!final && (rest.empty() || IsPartial(rest, kPythonTag))) *hold = text.size();
    return npos;
  }
  bool ParseSection(std::string_view s, bool final, std::vector<ToolCall>* calls,
                    size_t* consumed) const override {
    size_t p = SkipSpace(s, 0);
    if (StartsWith(s.substr(p), kPythonTag)) p += kPythonTag.size();
    while (true) {
      while (p < s.size() && (std::isspace(static_cast<unsigned char>(s[p])) || s[p] == ';')) ++p;
      if (p == s.size()) return true;
      if (s[p] != '{') return false;
      const size_t end = JsonValueEnd(s, p);
      if (end == npos) return !final;
      ToolCall call;
      if (!CallFromJsonText(s.substr(p, end - p), &call)) return false;
      calls->push_back(std::move(call));
      p = *consumed = end;
    }
  }

 private:
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
};

// ---- mistral ----

class MistralFormat : public ToolCallFormat {
 public:
  const char* name() const override { return "mistral"; }
  size_t FindStart(std::string_view text, bool final, size_t* hold) const override {
    return FindMarker(text, kToolCalls, final, hold);
  }
  bool ParseSection(std::string_view s, bool final, std::vector<ToolCall>* calls,
                    size_t* consumed) const override {
    size_t p = 0;
    while (true) {
      p = SkipSpace(s, p);
      if (p == s.size()) return true;
      if (!StartsWith(s.substr(p), kToolCalls)) return !final && IsPartial(s.substr(p), kToolCalls);
      p = SkipSpace(s, p + kToolCalls.size());
      if (p == s.size()) return !final;
      if (s[p] == '[' || s[p] == '{') {
        // [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (v3 tokenizers, Nemo).
        const size_t end = JsonValueEnd(s, p);
        if (end == npos) return !final;
        json v;
        if (!ParseJson(s.substr(p, end - p), &v)) return false;
        if (v.is_object()) v = json::array({v});
        std::vector<ToolCall> parsed;
        for (const json& item : v) {
          ToolCall call;
          if (!CallFromObject(item, &call)) return false;
          parsed.push_back(std::move(call));
        }
        if (parsed.empty()) return false;
        calls->insert(calls->end(), parsed.begin(), parsed.end());
        p = *consumed = end;
        continue;
      }
      // [TOOL_CALLS]N[ARGS]{...} (v11 tokenizers).
      const size_t args = s.find(kArgs, p);
      if (args == npos) {
        if (final) return false;
        return s.substr(p).find_first_of("{\n") == npos;  // the name is still coming
      }
      const std::string_view name = Trim(s.substr(p, args - p));
      const size_t obj = SkipSpace(s, args + kArgs.size());
      if (name.empty() || name.find_first_of(" {[\n") != npos) return false;
      if (obj == s.size()) return !final;
      if (s[obj] != '{') return false;
      const size_t end = JsonValueEnd(s, obj);
      if (end == npos) return !final;
      json v;
      ToolCall call;
      call.name = std::string(name);
      if (!ParseJson(s.substr(obj, end - obj), &v) || !ArgumentsText(v, &call.arguments))
        return false;
      calls->push_back(std::move(call));
      p = *consumed = end;
    }
  }
  // Mistral's templates require ids of 9 letters and digits.
  std::string NewCallId() const override {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kAlnum[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id(9, 'a');
    for (char& c : id) c = kAlnum[rng() % (sizeof(kAlnum) - 1)];
    return id;
  }

 private:
  static constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
  static constexpr std::string_view kArgs = "[ARGS]";
};

// ---- deepseek_v3 / deepseek_v31 ----

class DeepSeekFormat : public ToolCallFormat {
 public:
  explicit DeepSeekFormat(bool v31) : v31_(v31) {}
  const char* name() const override { return v31_ ? "deepseek_v31" : "deepseek_v3"; }
  size_t FindStart(std::string_view text, bool final, size_t* hold) const override {
    return FindMarker(text, kCallsBegin, final, hold);
  }
  bool ParseSection(std::string_view s, bool final, std::vector<ToolCall>* calls,
                    size_t* consumed) const override {
    size_t p = kCallsBegin.size();
    while (true) {
      p = SkipSpace(s, p);
      if (p == s.size()) return true;
      const std::string_view rest = s.substr(p);
      if (StartsWith(rest, kCallsEnd)) {
        p = *consumed = p + kCallsEnd.size();
        continue;  // text after the section: not a call (the next round returns false)
      }
      if (!StartsWith(rest, kCallBegin)) {
        return !final && (IsPartial(rest, kCallBegin) || IsPartial(rest, kCallsEnd));
      }
      const size_t body = p + kCallBegin.size();
      const size_t end = s.find(kCallEnd, body);
      if (end == npos) return !final;
      ToolCall call;
      if (!ParseCall(s.substr(body, end - body), &call)) return false;
      calls->push_back(std::move(call));
      p = *consumed = end + kCallEnd.size();
    }
  }

 private:
  // v3: "function<｜tool▁sep｜>NAME\n```json\n{...}\n```"; v3.1: "NAME<｜tool▁sep｜>{...}".
  bool ParseCall(std::string_view body, ToolCall* call) const {
    const size_t sep = body.find(kSep);
    if (sep == npos) return false;
    std::string_view name, args;
    if (v31_) {
      name = Trim(body.substr(0, sep));
      args = Trim(body.substr(sep + kSep.size()));
    } else {
      const std::string_view after = body.substr(sep + kSep.size());
      const size_t nl = after.find('\n');
      if (nl == npos) return false;
      name = Trim(after.substr(0, nl));
      args = Trim(after.substr(nl + 1));
      if (StartsWith(args, "```")) {
        const size_t line = args.find('\n');
        const size_t close = args.rfind("```");
        if (line == npos || close == npos || close <= line) return false;
        args = Trim(args.substr(line + 1, close - line - 1));
      }
    }
    json v;
    if (name.empty() || !ParseJson(args, &v) || !ArgumentsText(v, &call->arguments)) return false;
    call->name = std::string(name);
    return true;
  }

  static constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
  static constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
  static constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";
  bool v31_;
};

}  // namespace

std::string ToolCallFormat::NewCallId() const {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return std::string("call_") + buf;
}

std::unique_ptr<ToolCallFormat> MakeToolCallFormat(std::string_view name) {
  if (name == "hermes") return std::make_unique<HermesFormat>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonFormat>();
  if (name == "mistral") return std::make_unique<MistralFormat>();
  if (name == "deepseek_v3") return std::make_unique<DeepSeekFormat>(false);
  if (name == "deepseek_v31") return std::make_unique<DeepSeekFormat>(true);
  return nullptr;
}

std::string ToolCallFormatNames() {
  return "hermes, llama3_json, mistral, deepseek_v3, deepseek_v31";
}

ToolCallDelta ToolCallStream::Add(std::string_view text) {
  text_.append(text);
  return Step(false);
}

ToolCallDelta ToolCallStream::Finish() { return Step(true); }

ToolCallDelta ToolCallStream::Step(bool final) {
  ToolCallDelta d;
  d.first_index = num_calls_;
  if (section_start_ == std::string::npos && !failed_) {
    size_t hold = 0;
    const size_t start = format_.FindStart(text_, final, &hold);
    if (start == npos) {
      const size_t end = text_.size() - hold;
      if (end > content_end_) d.content = text_.substr(content_end_, end - content_end_);
      content_end_ = std::max(content_end_, end);
      return d;
    }
    if (start > content_end_) d.content = text_.substr(content_end_, start - content_end_);
    section_start_ = content_end_ = start;
  }
  if (!failed_) {
    const std::string_view section = std::string_view(text_).substr(section_start_);
    std::vector<ToolCall> calls;
    size_t consumed = 0;
    const bool ok = format_.ParseSection(section, final, &calls, &consumed);
    for (size_t i = static_cast<size_t>(num_calls_); i < calls.size(); ++i) {
      calls[i].id = format_.NewCallId();
      d.calls.push_back(std::move(calls[i]));
    }
    num_calls_ = static_cast<int64_t>(calls.size());
    if (num_calls_ > 0) parsed_end_ = consumed;
    if (ok && !final) return d;
    failed_ = !ok;
  }
  // The section is over (the end, or text that is not a call): what follows the last call,
  // or the whole section when no call parsed, is content.
  const size_t from = section_start_ + (num_calls_ > 0 ? parsed_end_ : 0);
  std::string rest = text_.substr(std::max(from, content_end_));
  content_end_ = text_.size();
  if (num_calls_ > 0 && Trim(rest).empty()) rest.clear();
  d.content += rest;
  return d;
}

ParsedToolCalls ParseToolCalls(const ToolCallFormat& format, std::string_view text) {
  ToolCallStream stream(format);
  ParsedToolCalls out;
  for (ToolCallDelta d : {stream.Add(text), stream.Finish()}) {
    out.content += d.content;
    for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  }
  return out;
}

}  // namespace pagoda
