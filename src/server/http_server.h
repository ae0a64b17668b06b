// HttpServer: the OpenAI-compatible routes on cpp-httplib.
//
//   POST /v1/completions, POST /v1/chat/completions   (SSE when "stream": true)
//   GET  /v1/models, GET /health, GET /metrics
//   POST /tokenize, POST /detokenize, GET /tokenizer_info   (vLLM's)
//
// Chat answers are parsed into tool calls with --tool-call-parser (tool_parser.h) when
// the request has tools and tool_choice is not "none"; responses are built by Generation.
//
// Each HTTP connection is served by one thread of httplib's pool; a request's handler
// submits to the AsyncEngine and then waits on its stream. Errors become OpenAI-style
// error objects (openai_api.h); --api-key guards /v1/*, /tokenize and /detokenize.
// A streaming client that goes away has its request aborted (its blocks freed) at the
// next write that fails.
//
// Shutdown: BeginShutdown() stops accepting connections (and answers 503 to new
// requests on open keep-alive connections); Run() returns once the handlers in flight
// have finished writing (streams included) and idle keep-alive connections timed out.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/async_engine.h"
#include "server/chat.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/tool_parser.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace pagoda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (see port())
  std::string api_key;     // empty: no authentication
  std::string model_path;  // shown as `root` in /v1/models
  int http_threads = 512;  // connections served at once (streams hold one each)
  std::string tool_call_parser;  // --tool-call-parser (tool_parser.h); empty: none
};

class HttpServer {
 public:
  // All references must outlive the server.
  HttpServer(AsyncEngine& engine, ServerMetrics& metrics, const ChatRenderer& chat,
             const ApiContext& ctx, const ServerOptions& options);
  ~HttpServer();

  // Binds the listening socket; throws pagoda::Error naming host:port on failure.
  void Bind();
  int port() const { return port_; }
  // Serves until BeginShutdown(); returns when the handlers in flight are done.
  void Run();
  // Thread-safe; may be called from a signal-handling thread.
  void BeginShutdown();

 private:
  void Routes();
  void HandleCompletions(const httplib::Request& req, httplib::Response& res);
  void HandleChat(const httplib::Request& req, httplib::Response& res);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  void HandleTokenizerInfo(httplib::Response& res);
  std::string RenderChat(const ChatRequest& chat) const;

  AsyncEngine& engine_;
  ServerMetrics& metrics_;
  const ChatRenderer& chat_;
  const ApiContext ctx_;
  const ServerOptions options_;
  const int64_t created_;
  std::unique_ptr<ToolCallFormat> tool_format_;  // null without --tool-call-parser
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> draining_{false};
  std::atomic<int> listen_fd_{-1};
  int port_ = 0;
};

}  // namespace pagoda
