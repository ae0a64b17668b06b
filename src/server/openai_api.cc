#include "server/openai_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "server/tool_parser.h"

namespace pagoda {

namespace {

const char* JsonTypeName(const ordered_json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void BadField(const std::string& name, const std::string& expected,
                           const ordered_json& got) {
  throw ApiError(400, "'" + name + "' must be " + expected + ", got " + JsonTypeName(got), name);
}

// Typed optional fields: absent or null -> nullopt; the wrong type -> 400.
class Fields {
 public:
  explicit Fields(const ordered_json& body) : body_(body) {}

  const ordered_json* Get(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::optional<double> Number(const char* name) const {
    const ordered_json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) BadField(name, "a number", *v);
    return v->get<double>();
  }
  std::optional<int64_t> Integer(const char* name) const {
    const ordered_json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    BadField(name, "an integer", *v);
  }
  std::optional<bool> Bool(const char* name) const {
    const ordered_json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) BadField(name, "a boolean", *v);
    return v->get<bool>();
  }
  std::optional<std::string> String(const char* name) const {
    const ordered_json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) BadField(name, "a string", *v);
    return v->get<std::string>();
  }

 private:
  const ordered_json& body_;
};

void ParseCommon(const ordered_json& body, const ApiContext& ctx, GenerationRequest* r) {
  Fields f(body);
  CheckModel(body, ctx);
  r->model = ctx.served_model_name;
  r->base.skip_special_tokens = f.Bool("skip_special_tokens").value_or(true);
  r->return_token_ids = f.Bool("return_token_ids").value_or(false);
  r->stream = f.Bool("stream").value_or(false);
  if (const ordered_json* so = f.Get("stream_options")) {
    if (!so->is_object()) BadField("stream_options", "an object", *so);
    Fields sf(*so);
    r->include_usage = sf.Bool("include_usage").value_or(false);
  }
  SamplingParams& s = r->base.sampling;
  if (auto v = f.Number("temperature")) s.temperature = *v;
  if (auto v = f.Number("top_p")) s.top_p = *v;
  if (auto v = f.Integer("top_k")) s.top_k = *v;
  if (auto v = f.Number("min_p")) s.min_p = *v;
  if (auto v = f.Number("repetition_penalty")) s.repetition_penalty = *v;
  if (auto v = f.Number("presence_penalty")) s.presence_penalty = *v;
  if (auto v = f.Number("frequency_penalty")) s.frequency_penalty = *v;
  if (auto v = f.Integer("seed")) s.seed = static_cast<uint64_t>(*v);
  if (s.temperature < 0) throw ApiError(400, "'temperature' must be >= 0", "temperature");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw ApiError(400, "'top_p' must be in (0, 1]", "top_p");
  if (!(s.min_p >= 0 && s.min_p <= 1)) throw ApiError(400, "'min_p' must be in [0, 1]", "min_p");
  if (!(s.repetition_penalty > 0))
    throw ApiError(400, "'repetition_penalty' must be > 0", "repetition_penalty");
  if (!(std::fabs(s.presence_penalty) <= 2))
    throw ApiError(400, "'presence_penalty' must be in [-2, 2]", "presence_penalty");
  if (!(std::fabs(s.frequency_penalty) <= 2)) {
    throw ApiError(400, "'frequency_penalty' must be in [-2, 2]", "frequency_penalty");
  }

  std::optional<int64_t> max_tokens = f.Integer("max_tokens");
  const char* max_name = "max_tokens";
  if (auto v = f.Integer("max_completion_tokens")) {
    max_tokens = v;
    max_name = "max_completion_tokens";
  }
  if (max_tokens) {
    if (*max_tokens < 1) {
      throw ApiError(
          400,
          std::string("'") + max_name + "' must be at least 1, got " + std::to_string(*max_tokens),
          max_name);
    }
    if (*max_tokens > ctx.max_model_len) {
      throw ApiError(400,
                     std::string("'") + max_name + "' is " + std::to_string(*max_tokens) +
                         ", more than this model's maximum context length of " +
                         std::to_string(ctx.max_model_len) + " tokens",
                     max_name);
    }
    r->max_tokens = max_tokens;
  }
  if (auto v = f.Integer("min_tokens")) {
    if (*v < 0) throw ApiError(400, "'min_tokens' must be >= 0", "min_tokens");
    r->base.min_tokens = *v;
  }
  if (auto v = f.Integer("n")) {
    if (*v < 1 || *v > 128)
      throw ApiError(400, "'n' must be in [1, 128], got " + std::to_string(*v), "n");
    r->base.n = *v;
  }
  r->base.ignore_eos = f.Bool("ignore_eos").value_or(false);
  if (auto v = f.String("cache_salt")) r->base.cache_salt = *v;
  if (const ordered_json* stop = f.Get("stop")) {
    if (stop->is_string()) {
      r->base.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s1 : *stop) {
        if (!s1.is_string()) BadField("stop", "a string or a list of strings", s1);
        r->base.stop.push_back(s1.get<std::string>());
      }
    } else {
      BadField("stop", "a string or a list of strings", *stop);
    }
    for (const std::string& s1 : r->base.stop) {
      if (s1.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
    }
    if (!r->base.stop.empty() && ctx.tokenizer == nullptr) {
      throw ApiError(400, "'stop' strings need a tokenizer, and this model has none", "stop");
    }
  }
  if (const ordered_json* ids = f.Get("stop_token_ids")) {
    if (!ids->is_array()) BadField("stop_token_ids", "a list of integers", *ids);
    for (const auto& id : *ids) {
      if (!id.is_number_integer()) BadField("stop_token_ids", "a list of integers", id);
      r->base.stop_token_ids.push_back(id.get<int32_t>());
    }
  }
}

std::vector<int32_t> ParseIdArray(const ordered_json& arr, const ApiContext& ctx) {
  std::vector<int32_t> ids;
  for (const auto& v : arr) {
    if (!v.is_number_integer()) BadField("prompt", "a string, a list of strings, or token ids", v);
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= ctx.vocab_size) {
      throw ApiError(400,
                     "prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                         std::to_string(ctx.vocab_size) + ")",
                     "prompt");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> EncodeText(const std::string& text, bool add_special, const ApiContext& ctx,
                                const char* param) {
  if (ctx.tokenizer == nullptr) {
    throw ApiError(400, "this model has no tokenizer: send token ids", param);
  }
  EncodeOptions o;
  o.add_special_tokens = add_special;
  o.parse_special = true;
  return ctx.tokenizer->Encode(text, o);
}

std::string DecodeIds(const std::vector<int32_t>& ids, const ApiContext& ctx) {
  return ctx.tokenizer ? ctx.tokenizer->Decode(ids, /*skip_special=*/true) : std::string();
}

}  // namespace

int HttpStatusFor(const Error& e) {
  if (const auto* api = dynamic_cast<const ApiError*>(&e)) return api->status();
  switch (e.code()) {
    case ErrorCode::kResourceExhausted:
      return 503;
    case ErrorCode::kInternal:
      return 500;
    default:
      return 400;
  }
}

ordered_json ErrorBody(int status, const std::string& message, const std::string& param,
                       const std::string& code) {
  const char* type = "BadRequestError";
  if (status == 401) type = "AuthenticationError";
  if (status == 404) type = "NotFoundError";
  if (status == 503) type = "ServiceUnavailableError";
  if (status >= 500 && status != 503) type = "InternalServerError";
  ordered_json err = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return ordered_json{{"error", err}};
}

void ThrowModelNotFound(const std::string& model, const std::string& served) {
  throw ApiError(404, "The model `" + model + "` does not exist (this server serves `" + served + "`)",
                 "model", "model_not_found");
}

void CheckModel(const ordered_json& body, const ApiContext& ctx) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) BadField("model", "a string", *it);
  if (it->get<std::string>() != ctx.served_model_name) {
    ThrowModelNotFound(it->get<std::string>(), ctx.served_model_name);
  }
}

void ParseTools(const ordered_json& body, const ApiContext& ctx, ChatRequest* r) {
  Fields f(body);
  std::vector<std::string> names;
  if (const ordered_json* tools = f.Get("tools")) {
    if (!tools->is_array()) BadField("tools", "a list", *tools);
    for (const auto& t : *tools) {
      const ordered_json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
      if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        throw ApiError(400, "every tool needs {\"type\": \"function\", \"function\": {\"name\": ...}}",
                       "tools");
      }
      names.push_back((*fn)["name"].get<std::string>());
    }
    if (!tools->empty()) r->tools = *tools;
  }
  const ordered_json* choice = f.Get("tool_choice");
  if (choice == nullptr) {
    r->tool_choice = !names.empty() && ctx.has_tool_parser ? ToolChoice::kAuto : ToolChoice::kNone;
    return;
  }
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      r->tool_choice = ToolChoice::kNone;
      return;
    }
    if (c == "auto") {
      r->tool_choice = ToolChoice::kAuto;
    } else if (c == "required") {
      r->tool_choice = ToolChoice::kRequired;
    } else {
      throw ApiError(400, "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got \"" + c + "\"",
                     "tool_choice");
    }
  } else if (choice->is_object()) {
    const ordered_json* fn = choice->contains("function") ? &(*choice)["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw ApiError(400, "a named 'tool_choice' is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                     "tool_choice");
    }
    r->tool_choice = ToolChoice::kNamed;
    r->tool_choice_name = (*fn)["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), r->tool_choice_name) == names.end()) {
      throw ApiError(400, "'tool_choice' names the function `" + r->tool_choice_name + "`, which is not in 'tools'",
                     "tool_choice");
    }
  } else {
    BadField("tool_choice", "a string or an object", *choice);
  }
  if (names.empty()) throw ApiError(400, "'tool_choice' other than \"none\" needs 'tools'", "tool_choice");
  if (!ctx.has_tool_parser) {
    const char* which = r->tool_choice == ToolChoice::kAuto       ? "\"auto\""
                        : r->tool_choice == ToolChoice::kRequired ? "\"required\""
                                                                  : "a named function";
    throw ApiError(400,
                   std::string("tool_choice ") + which +
                       " needs the server to be started with --tool-call-parser (one of " +
                       ToolCallFormatNames() + ")",
                   "tool_choice");
  }
}

ordered_json ParseJsonBody(const std::string& body) {
  ordered_json j;
  try {
    j = ordered_json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw ApiError(400, std::string("malformed JSON in the request body: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

CompletionRequest ParseCompletionRequest(const ordered_json& body, const ApiContext& ctx) {
  CompletionRequest r;
  ParseCommon(body, ctx, &r);
  Fields f(body);
  r.echo = f.Bool("echo").value_or(false);
  const bool add_special = f.Bool("add_special_tokens").value_or(true);
  if (auto v = f.Integer("logprobs")) {
    if (*v < 0 || *v > 20) throw ApiError(400, "'logprobs' must be in [0, 20]", "logprobs");
    r.logprobs = *v;
    r.base.sampling.logprobs = *v;
  }
  if (auto v = f.Integer("prompt_logprobs")) {
    if (*v < 0 || *v > 20) throw ApiError(400, "'prompt_logprobs' must be in [0, 20]", "prompt_logprobs");
    r.prompt_logprobs = *v;
  }
  // The prompt's logprobs come from the prefill's own forward pass (no second pass).
  int64_t k = r.prompt_logprobs;
  if (r.echo && r.logprobs >= 0) k = std::max(k, r.logprobs);
  r.base.prompt_logprobs = k;
  const ordered_json* p = f.Get("prompt");
  if (p == nullptr) throw ApiError(400, "'prompt' is required", "prompt");
  if (p->is_string()) {
    r.prompts.push_back(EncodeText(p->get<std::string>(), add_special, ctx, "prompt"));
    r.prompt_texts.push_back(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) throw ApiError(400, "'prompt' is empty", "prompt");
    const ordered_json& first = (*p)[0];
    if (first.is_number_integer()) {
      r.prompts.push_back(ParseIdArray(*p, ctx));
      r.prompt_texts.push_back(DecodeIds(r.prompts.back(), ctx));
    } else if (first.is_string() || first.is_array()) {
      for (const auto& item : *p) {
        if (item.is_string() && first.is_string()) {
          r.prompts.push_back(EncodeText(item.get<std::string>(), add_special, ctx, "prompt"));
          r.prompt_texts.push_back(item.get<std::string>());
        } else if (item.is_array() && first.is_array()) {
          r.prompts.push_back(ParseIdArray(item, ctx));
          r.prompt_texts.push_back(DecodeIds(r.prompts.back(), ctx));
        } else {
          BadField("prompt", "a string, a list of strings, token ids, or a list of token-id lists",
                   item);
        }
      }
    } else {
      BadField("prompt", "a string, a list of strings, token ids, or a list of token-id lists",
               first);
    }
  } else {
    BadField("prompt", "a string, a list of strings, token ids, or a list of token-id lists", *p);
  }
  if (r.prompts.size() > 1024) throw ApiError(400, "at most 1024 prompts per request", "prompt");
  return r;
}

ordered_json ParseMessages(const ordered_json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'messages' is required", "messages");
  if (!it->is_array()) BadField("messages", "a list of message objects", *it);
  if (it->empty()) throw ApiError(400, "'messages' is empty", "messages");
  ordered_json out = ordered_json::array();
  for (const auto& m : *it) {
    if (!m.is_object()) BadField("messages", "a list of message objects", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      throw ApiError(400, "every message needs a string 'role'", "messages");
    }
    ordered_json msg = m;
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      // Content parts: join the text parts with newlines (vLLM's "string" format).
      std::string text;
      bool first = true;
      for (const auto& part : *content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          throw ApiError(
              400, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
              "messages");
        }
        if (!first) text += "\n";
        text += part["text"].get<std::string>();
        first = false;
      }
      msg["content"] = text;
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      BadField("messages[].content", "a string or a list of content parts", *content);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ChatRequest ParseChatRequest(const ordered_json& body, const ApiContext& ctx) {
  ChatRequest r;
  ParseCommon(body, ctx, &r);
  Fields f(body);
  r.messages = ParseMessages(body);
  ParseTools(body, ctx, &r);
  if (r.tool_choice != ToolChoice::kNone) r.base.skip_special_tokens = false;  // keep the markers
  if (auto v = f.Integer("prompt_logprobs")) {
    if (*v < 0 || *v > 20) throw ApiError(400, "'prompt_logprobs' must be in [0, 20]", "prompt_logprobs");
    r.prompt_logprobs = *v;
    r.base.prompt_logprobs = *v;
  }
  if (const ordered_json* kw = f.Get("chat_template_kwargs")) {
    if (!kw->is_object()) BadField("chat_template_kwargs", "an object", *kw);
    r.chat_template_kwargs = *kw;
  }
  r.add_generation_prompt = f.Bool("add_generation_prompt").value_or(true);
  r.logprobs = f.Bool("logprobs").value_or(false);
  if (auto v = f.Integer("top_logprobs")) {
    if (*v < 0 || *v > 20) throw ApiError(400, "'top_logprobs' must be in [0, 20]", "top_logprobs");
    if (!r.logprobs && *v > 0)
      throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.top_logprobs = *v;
  }
  if (r.logprobs) r.base.sampling.logprobs = r.top_logprobs;
  return r;
}

std::vector<RequestSpec> MakeSpecs(const std::vector<std::vector<int32_t>>& prompts,
                                   const GenerationRequest& req, const ApiContext& ctx) {
  std::vector<RequestSpec> specs;
  for (const auto& prompt : prompts) {
    const int64_t len = static_cast<int64_t>(prompt.size());
    if (len == 0) throw ApiError(400, "the prompt is empty", "prompt");
    if (len >= ctx.max_model_len) {
      throw ApiError(400,
                     "this model's maximum context length is " + std::to_string(ctx.max_model_len) +
                         " tokens, but the prompt has " + std::to_string(len) + " tokens",
                     "prompt");
    }
    RequestSpec spec = req.base;
    spec.prompt = prompt;
    spec.max_tokens = req.max_tokens.value_or(ctx.max_model_len - len);
    if (len + spec.max_tokens > ctx.max_model_len) {
      throw ApiError(400,
                     "this model's maximum context length is " + std::to_string(ctx.max_model_len) +
                         " tokens, but " + std::to_string(len + spec.max_tokens) +
                         " were requested (" + std::to_string(len) + " in the prompt, " +
                         std::to_string(spec.max_tokens) + " for the completion)",
                     "max_tokens");
    }
    if (spec.min_tokens > spec.max_tokens) {
      throw ApiError(400, "'min_tokens' must not exceed max_tokens", "min_tokens");
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string NewRequestId(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return prefix + buf;
}

int64_t UnixTime() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return "token_id:" + std::to_string(id);
  // The token as it reads inside a text: SentencePiece drops the leading space of the first
  // token of a decode, so decode it second (after itself) and take what it added; the
  // texts of consecutive tokens then add up to the text.
  const int32_t one[1] = {id};
  const int32_t two[2] = {id, id};
  const std::string alone = tokenizer->Decode(one, /*skip_special=*/false);
  const std::string twice = tokenizer->Decode(two, /*skip_special=*/false);
  if (twice.size() >= alone.size() && twice.compare(0, alone.size(), alone) == 0) {
    return twice.substr(alone.size());
  }
  return alone;
}

namespace {
double FiniteLogprob(double v) { return std::isfinite(v) ? v : -9999.0; }

ordered_json Bytes(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

ordered_json CompletionLogprobs(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps,
                                int64_t text_offset) {
  ordered_json tokens = ordered_json::array(), token_logprobs = ordered_json::array(),
               top = ordered_json::array(), offsets = ordered_json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string text = TokenText(tokenizer, lp.token);
    tokens.push_back(text);
    token_logprobs.push_back(FiniteLogprob(lp.logprob));
    ordered_json t = ordered_json::object();
    for (const auto& [id, v] : lp.top) t[TokenText(tokenizer, id)] = FiniteLogprob(v);
    top.push_back(std::move(t));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }
  return ordered_json{{"text_offset", offsets},
                      {"token_logprobs", token_logprobs},
                      {"tokens", tokens},
                      {"top_logprobs", top}};
}

ordered_json EchoCompletionLogprobs(const Tokenizer* tokenizer, int32_t first_prompt_token,
                                    const std::vector<TokenLogprobs>& prompt_lps,
                                    const std::vector<TokenLogprobs>& lps) {
  std::vector<TokenLogprobs> all;
  all.reserve(1 + prompt_lps.size() + lps.size());
  TokenLogprobs first;
  first.token = first_prompt_token;
  all.push_back(first);
  all.insert(all.end(), prompt_lps.begin(), prompt_lps.end());
  all.insert(all.end(), lps.begin(), lps.end());
  ordered_json j = CompletionLogprobs(tokenizer, all, 0);
  j["token_logprobs"][0] = nullptr;
  j["top_logprobs"][0] = nullptr;
  return j;
}

ordered_json PromptLogprobsJson(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps) {
  ordered_json out = ordered_json::array({nullptr});
  for (const TokenLogprobs& lp : lps) {
    ordered_json pos = ordered_json::object();
    pos[std::to_string(lp.token)] = {{"logprob", FiniteLogprob(lp.logprob)},
                                     {"rank", lp.rank},
                                     {"decoded_token", TokenText(tokenizer, lp.token)}};
    for (size_t i = 0; i < lp.top.size(); ++i) {
      const auto& [id, v] = lp.top[i];
      if (id == lp.token) continue;
      pos[std::to_string(id)] = {{"logprob", FiniteLogprob(v)},
                                 {"rank", static_cast<int64_t>(i) + 1},
                                 {"decoded_token", TokenText(tokenizer, id)}};
    }
    out.push_back(std::move(pos));
  }
  return out;
}

ordered_json ChatLogprobs(const Tokenizer* tokenizer, const std::vector<TokenLogprobs>& lps) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string text = TokenText(tokenizer, lp.token);
    ordered_json top = ordered_json::array();
    for (const auto& [id, v] : lp.top) {
      const std::string t = TokenText(tokenizer, id);
      top.push_back({{"token", t}, {"logprob", FiniteLogprob(v)}, {"bytes", Bytes(t)}});
    }
    content.push_back({{"token", text},
                       {"logprob", FiniteLogprob(lp.logprob)},
                       {"bytes", Bytes(text)},
                       {"top_logprobs", top}});
  }
  return ordered_json{{"content", content}};
}

ordered_json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ordered_json u = {{"prompt_tokens", prompt_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens},
                    {"completion_tokens", completion_tokens}};
  if (cached_tokens >= 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

ordered_json FinishReasonJson(FinishReason r) {
  if (r == FinishReason::kNone) return nullptr;
  return FinishReasonName(r);
}

std::string DumpJson(const ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SseEvent(const ordered_json& j) { return "data: " + DumpJson(j) + "\n\n"; }

}  // namespace pagoda
