#include "server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>

#include "core/error.h"
#include "core/logging.h"
#include "server/generation.h"
#include "server/httplib_config.h"
#include "server/tool_parser.h"

namespace pagoda {

namespace {

constexpr const char* kJson = "application/json";

void SendJson(httplib::Response& res, int status, const ordered_json& j) {
  res.status = status;
  res.set_content(DumpJson(j), kJson);
}

void SendError(httplib::Response& res, const std::string& log_id, int status,
               const std::string& message, const std::string& param = "",
               const std::string& code = "") {
  PAGODA_LOG(kWarning) << (log_id.empty() ? "request" : log_id) << ": " << status << ": "
                       << message;
  SendJson(res, status, ErrorBody(status, message, param, code));
}

// Runs a handler, turning every exception into an OpenAI-style error response.
void Guarded(const std::string& log_id, httplib::Response& res, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    SendError(res, log_id, e.status(), e.what(), e.param(), e.code());
  } catch (const Error& e) {
    SendError(res, log_id, HttpStatusFor(e), e.what());
  } catch (const nlohmann::json::exception& e) {
    SendError(res, log_id, 400, std::string("bad request: ") + e.what());
  } catch (const std::exception& e) {
    SendError(res, log_id, 500, std::string("internal error: ") + e.what());
  }
}

// Waits for the stream and answers with one JSON document, or streams SSE chunks.
void Respond(AsyncEngine& engine, std::shared_ptr<Generation> g, bool stream,
             httplib::Response& res) {
  if (!stream) {
    for (const ChoiceOutput& o : g->stream->WaitAll()) g->Apply(o);
    SendJson(res, 200, g->Response());
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&engine, g](size_t /*offset*/, httplib::DataSink& sink) {
        std::vector<ChoiceOutput> outs;
        const bool more = g->stream->Wait(&outs, std::chrono::milliseconds(200));
        for (const ChoiceOutput& o : outs) {
          std::string events;
          for (const ordered_json& chunk : g->Chunks(o)) events += SseEvent(chunk);
          if (events.empty()) continue;
          if (!sink.write(events.data(), events.size())) {
            PAGODA_LOG(kInfo) << g->id << ": client disconnected";
            engine.Abort(g->stream);
            return false;
          }
        }
        if (!more) {
          std::string tail;
          if (g->include_usage) {
            ordered_json u = g->Envelope(g->chat ? "chat.completion.chunk" : "text_completion");
            u["choices"] = ordered_json::array();
            u["usage"] = g->UsageJson();
            tail += SseEvent(u);
          }
          tail += kSseDone;
          if (!sink.write(tail.data(), tail.size())) return false;
          g->done = true;
          sink.done();
        } else if (outs.empty() && !sink.is_writable()) {
          PAGODA_LOG(kInfo) << g->id << ": client disconnected";
          engine.Abort(g->stream);
          return false;
        }
        return true;
      },
      [&engine, g](bool /*success*/) {
        // The connection is gone (or the stream ended): never leave work behind.
        if (!g->stream->finished()) engine.Abort(g->stream);
      });
}

}  // namespace

HttpServer::HttpServer(AsyncEngine& engine, ServerMetrics& metrics, const ChatRenderer& chat,
                       const ApiContext& ctx, const ServerOptions& options)
    : engine_(engine),
      metrics_(metrics),
      chat_(chat),
      ctx_(ctx),
      options_(options),
      created_(UnixTime()),
      server_(std::make_unique<httplib::Server>()) {
  const int threads = std::max(4, options_.http_threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_keep_alive_max_count(1000);
  // Keep the listening socket so that BeginShutdown can stop accepting without
  // httplib's stop(), which would also cut the streams still being written.
  server_->set_socket_options([this](socket_t sock) {
    int yes = 1;  // not httplib's SO_REUSEPORT: a second server on the port must fail
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // Accepted sockets inherit TCP_NODELAY: SSE chunks are small writes that Nagle's
    // algorithm would hold back until the client's delayed ACK (tens of ms per token).
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    listen_fd_ = static_cast<int>(sock);
  });
  if (!options_.tool_call_parser.empty()) {
    tool_format_ = MakeToolCallFormat(options_.tool_call_parser);
    PAGODA_ENSURE(tool_format_ != nullptr, ErrorCode::kInvalidArgument,
                  "--tool-call-parser " << options_.tool_call_parser << ": unknown (one of "
                                        << ToolCallFormatNames() << ")");
  }
  server_->set_read_timeout(std::chrono::seconds(60));
  server_->set_write_timeout(std::chrono::seconds(60));
  Routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::Bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    PAGODA_ENSURE(port_ > 0, ErrorCode::kInvalidArgument,
                  "cannot listen on " << options_.host << ":0");
  } else {
    PAGODA_ENSURE(server_->bind_to_port(options_.host, options_.port), ErrorCode::kInvalidArgument,
                  "cannot listen on " << options_.host << ":" << options_.port
                                      << " (in use, or not an address of this machine)");
    port_ = options_.port;
  }
  // httplib listens with a backlog of 5 (compiled in): a burst of clients would see
  // dropped connections and SYN retries. Listening again raises it (Linux).
  if (listen_fd_ >= 0) ::listen(listen_fd_, 4096);
}

void HttpServer::Run() { server_->listen_after_bind(); }

void HttpServer::BeginShutdown() {
  if (draining_.exchange(true)) return;
  // accept() fails once the socket is shut down: httplib's accept loop ends, closes the
  // socket and waits for the handlers in flight (streams included) to finish.
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string& p = req.path;
    const bool guarded = p.rfind("/v1/", 0) == 0 || p == "/tokenize" || p == "/detokenize" ||
                         p == "/tokenizer_info";
    if (guarded && !options_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      SendError(res, "", 401,
                "Unauthorized: a valid API key is required (Authorization: Bearer <key>)");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (guarded && draining_ && req.method == "POST") {
      SendError(res, "", 503, "the server is shutting down");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletions(req, res);
  });
  s.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) { HandleChat(req, res); });
  s.Post("/tokenize",
         [this](const httplib::Request& req, httplib::Response& res) { HandleTokenize(req, res); });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    HandleDetokenize(req, res);
  });
  s.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    HandleTokenizerInfo(res);
  });
  s.Get("/v1/models",
        [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    // 503 once a step has failed (AsyncEngine::Failure): the server cannot run requests.
    if (const std::string failure = engine_.Failure(); !failure.empty()) {
      SendError(res, "", 503, "the engine failed: " + failure);
      return;
    }
    res.status = 200;
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(engine_.Stats()), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty() && res.status == 404) {
      SendJson(res, 404, ErrorBody(404, "no route for " + req.method + " " + req.path));
    }
  });
}

void HttpServer::HandleCompletions(const httplib::Request& req, httplib::Response& res) {
  const std::string id = NewRequestId("cmpl-");
  Guarded(id, res, [&] {
    const ordered_json body = ParseJsonBody(req.body);
    CompletionRequest cr = ParseCompletionRequest(body, ctx_);
    std::vector<RequestSpec> specs = MakeSpecs(cr.prompts, cr, ctx_);
    auto g = std::make_shared<Generation>();
    g->id = id;
    g->model = cr.model;
    g->created = UnixTime();
    g->n = cr.base.n;
    g->include_usage = cr.include_usage;
    g->want_logprobs = cr.logprobs >= 0;
    g->echo = cr.echo;
    g->want_prompt_logprobs = cr.prompt_logprobs >= 0;
    g->return_token_ids = cr.return_token_ids;
    g->prompt_ids = cr.prompts;
    g->prompt_texts = cr.prompt_texts;
    g->tokenizer = ctx_.tokenizer;
    int64_t total = 0;
    for (const auto& p : cr.prompts) {
      g->prompt_lens.push_back(static_cast<int64_t>(p.size()));
      g->first_prompt_ids.push_back(p.empty() ? -1 : p[0]);
      total += static_cast<int64_t>(p.size());
    }
    PAGODA_LOG(kInfo) << id << ": POST /v1/completions: " << cr.prompts.size() << " prompt(s), "
                      << total << " prompt tokens, max_tokens " << specs[0].max_tokens << ", n "
                      << cr.base.n << (cr.stream ? ", stream" : "");
    g->stream = engine_.Submit(std::move(specs), id);
    g->Init(g->stream->num_choices());
    Respond(engine_, g, cr.stream, res);
  });
}

std::string HttpServer::RenderChat(const ChatRequest& chat) const {
  return chat_.Render(chat.messages, chat.tools, chat.add_generation_prompt,
                      chat.chat_template_kwargs);
}

void HttpServer::HandleChat(const httplib::Request& req, httplib::Response& res) {
  const std::string id = NewRequestId("chatcmpl-");
  Guarded(id, res, [&] {
    const ordered_json body = ParseJsonBody(req.body);
    ChatRequest cr = ParseChatRequest(body, ctx_);
    if (ctx_.tokenizer == nullptr)
      throw ApiError(400, "this model has no tokenizer: chat needs one", "messages");
    const std::string prompt = RenderChat(cr);
    EncodeOptions o;
    o.add_special_tokens = false;  // the template writes BOS itself (vLLM's default for chat)
    o.parse_special = true;
    std::vector<std::vector<int32_t>> prompts = {ctx_.tokenizer->Encode(prompt, o)};
    std::vector<RequestSpec> specs = MakeSpecs(prompts, cr, ctx_);
    auto g = std::make_shared<Generation>();
    g->chat = true;
    g->id = id;
    g->model = cr.model;
    g->created = UnixTime();
    g->n = cr.base.n;
    g->include_usage = cr.include_usage;
    g->want_logprobs = cr.logprobs;
    g->want_prompt_logprobs = cr.prompt_logprobs >= 0;
    g->tokenizer = ctx_.tokenizer;
    if (cr.tool_choice != ToolChoice::kNone) g->tool_format = tool_format_.get();
    g->prompt_lens = {static_cast<int64_t>(prompts[0].size())};
    g->first_prompt_ids = {prompts[0].empty() ? -1 : prompts[0][0]};
    g->return_token_ids = cr.return_token_ids;
    g->prompt_ids = prompts;
    PAGODA_LOG(kInfo) << id << ": POST /v1/chat/completions: " << cr.messages.size()
                      << " message(s), " << prompts[0].size() << " prompt tokens, max_tokens "
                      << specs[0].max_tokens << ", n " << cr.base.n
                      << (cr.stream ? ", stream" : "");
    g->stream = engine_.Submit(std::move(specs), id);
    g->Init(g->stream->num_choices());
    Respond(engine_, g, cr.stream, res);
  });
}

void HttpServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  Guarded("tokenize", res, [&] {
    const ordered_json body = ParseJsonBody(req.body);
    CheckModel(body, ctx_);
    if (ctx_.tokenizer == nullptr) throw ApiError(400, "this model has no tokenizer");
    std::string text;
    bool add_special = true;
    if (body.contains("messages")) {
      // The prompt the chat endpoint would run: the same messages, tools and kwargs.
      ChatRequest cr;
      cr.messages = ParseMessages(body);
      ParseTools(body, ctx_, &cr);
      if (body.contains("add_generation_prompt")) {
        if (!body["add_generation_prompt"].is_boolean())
          throw ApiError(400, "'add_generation_prompt' must be a boolean", "add_generation_prompt");
        cr.add_generation_prompt = body["add_generation_prompt"].get<bool>();
      }
      if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
        if (!body["chat_template_kwargs"].is_object())
          throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
        cr.chat_template_kwargs = body["chat_template_kwargs"];
      }
      text = RenderChat(cr);
      add_special = false;
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      text = body["prompt"].get<std::string>();
    } else {
      throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt");
    }
    if (body.contains("add_special_tokens")) {
      if (!body["add_special_tokens"].is_boolean()) {
        throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
      }
      add_special = body["add_special_tokens"].get<bool>();
    }
    EncodeOptions o;
    o.add_special_tokens = add_special;
    o.parse_special = true;
    const std::vector<int32_t> ids = ctx_.tokenizer->Encode(text, o);
    SendJson(res, 200,
             ordered_json{
                 {"count", ids.size()}, {"max_model_len", ctx_.max_model_len}, {"tokens", ids}});
  });
}

void HttpServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  Guarded("detokenize", res, [&] {
    const ordered_json body = ParseJsonBody(req.body);
    if (ctx_.tokenizer == nullptr) throw ApiError(400, "this model has no tokenizer");
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
      throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens");
    std::vector<int32_t> ids;
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= ctx_.vocab_size) {
        throw ApiError(400,
                       "'tokens' must be token ids in [0, " + std::to_string(ctx_.vocab_size) + ")",
                       "tokens");
      }
      ids.push_back(v.get<int32_t>());
    }
    SendJson(res, 200,
             ordered_json{{"prompt", ctx_.tokenizer->Decode(ids, /*skip_special=*/true)}});
  });
}

// vLLM's /tokenizer_info: what a client-side harness needs to tokenize through /tokenize
// (lm-evaluation-harness's "remote" tokenizer backend reads it).
void HttpServer::HandleTokenizerInfo(httplib::Response& res) {
  Guarded("tokenizer_info", res, [&] {
    if (ctx_.tokenizer == nullptr) throw ApiError(404, "this model has no tokenizer");
    auto token_or_null = [](const std::string& t) { return t.empty() ? ordered_json(nullptr) : ordered_json(t); };
    SendJson(res, 200,
             ordered_json{{"tokenizer_class", "pagoda"},
                          {"bos_token", token_or_null(chat_.bos_token())},
                          {"eos_token", token_or_null(chat_.eos_token())},
                          {"pad_token", nullptr},
                          {"chat_template", token_or_null(chat_.source())},
                          {"model_max_length", ctx_.max_model_len},
                          {"vocab_size", ctx_.vocab_size}});
  });
}

void HttpServer::HandleModels(httplib::Response& res) {
  ordered_json model = {{"id", ctx_.served_model_name},
                        {"object", "model"},
                        {"created", created_},
                        {"owned_by", "pagoda"},
                        {"root", options_.model_path},
                        {"parent", nullptr},
                        {"max_model_len", ctx_.max_model_len},
                        {"vocab_size", ctx_.vocab_size}};
  SendJson(res, 200, ordered_json{{"object", "list"}, {"data", ordered_json::array({model})}});
}

}  // namespace pagoda
