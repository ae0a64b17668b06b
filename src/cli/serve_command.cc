// pagoda serve: the OpenAI-compatible HTTP server (docs/serving.md).
//
// Threads: main runs the HTTP accept loop; httplib's pool serves connections; the
// AsyncEngine thread steps the engine; one thread waits for SIGINT/SIGTERM (blocked in
// every other thread) and drives the graceful shutdown.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <thread>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/model_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "server/async_engine.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/tool_parser.h"

namespace pagoda::cli {
namespace {

struct ServeFlags {
  ModelFlags model;
  EngineFlags engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  std::string chat_template;
  int64_t max_queue = 1024;
  double shutdown_timeout = 10.0;
  int http_threads = 512;
  double stats_interval = 5.0;
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
};

// Waits for SIGINT/SIGTERM, then: stop accepting, let requests in flight finish for up
// to `timeout_s`, abort the rest. A second signal aborts at once.
void HandleSignals(const sigset_t& set, HttpServer& server, AsyncEngine& engine, double timeout_s,
                   std::atomic<bool>& shutting_down) {
  int sig = 0;
  sigwait(&set, &sig);
  if (!shutting_down.exchange(true)) {
    PAGODA_LOG(kInfo) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                      << ": no new requests; waiting up to " << timeout_s << " s for "
                      << engine.NumUnfinished() << " in flight";
  } else {
    return;  // Run() ended on its own and woke us up
  }
  server.BeginShutdown();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (engine.NumUnfinished() > 0 && std::chrono::steady_clock::now() < deadline) {
    timespec wait = {0, 50 * 1000 * 1000};
    if (sigtimedwait(&set, nullptr, &wait) > 0) {
      PAGODA_LOG(kInfo) << "second signal: aborting what is left";
      break;
    }
  }
  if (engine.NumUnfinished() > 0) {
    PAGODA_LOG(kWarning) << "aborting " << engine.NumUnfinished() << " unfinished request(s)";
    engine.AbortAll();
  }
}

int RunServe(const ServeFlags& f) {
  std::signal(SIGPIPE, SIG_IGN);
  // Block the shutdown signals before any thread starts, so only HandleSignals sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  // Checked before the model loads: a typo costs no wait.
  PAGODA_ENSURE(f.tool_call_parser.empty() || MakeToolCallFormat(f.tool_call_parser) != nullptr,
                ErrorCode::kInvalidArgument,
                "--tool-call-parser " << f.tool_call_parser << ": unknown (one of "
                                      << ToolCallFormatNames() << ")");
  PAGODA_ENSURE(!f.enable_auto_tool_choice || !f.tool_call_parser.empty(),
                ErrorCode::kInvalidArgument, "--enable-auto-tool-choice needs --tool-call-parser");
  auto model = f.model.LoadModel();
  auto tokenizer = f.model.LoadTokenizer(*model);
  const EngineConfig config = f.engine.MakeConfig(f.model, *model);
  Engine engine(*model, tokenizer.get(), config);

  const ChatTemplateSource source = f.chat_template.empty() ? LoadChatTemplateSource(f.model.model)
                                                            : ReadChatTemplateFile(f.chat_template);
  ChatRenderer chat(source, tokenizer.get());
  if (chat.has_template()) {
    PAGODA_LOG(kInfo) << "chat template: " << chat.origin();
  } else {
    PAGODA_LOG(kInfo)
        << "no chat template: /v1/chat/completions will answer 400 (use --chat-template FILE)";
  }

  // The embedded default answers to its own name, not the cache path it was unpacked to.
  const std::string name = !f.served_model_name.empty() ? f.served_model_name
                           : f.model.embedded_default    ? std::string(kDefaultModelName)
                                                         : f.model.model;
  ServerMetrics metrics(name);
  AsyncEngineOptions engine_options;
  engine_options.max_queue = f.max_queue;
  engine_options.stats_interval_s = f.stats_interval;
  AsyncEngine async(engine, &metrics, engine_options);

  ApiContext ctx;
  ctx.tokenizer = tokenizer.get();
  ctx.served_model_name = name;
  ctx.max_model_len = config.scheduler.max_model_len;
  ctx.vocab_size = model->spec().vocab_size;
  ctx.has_tool_parser = !f.tool_call_parser.empty();
  ServerOptions options;
  options.host = f.host;
  options.port = f.port;
  options.api_key = f.api_key;
  options.model_path = f.model.model;
  options.http_threads = f.http_threads;
  options.tool_call_parser = f.tool_call_parser;
  if (!f.tool_call_parser.empty()) {
    PAGODA_LOG(kInfo) << "tool-call parser: " << f.tool_call_parser;
  }
  HttpServer server(async, metrics, chat, ctx, options);
  server.Bind();
  PAGODA_LOG(kInfo) << "serving " << name << " (max_model_len " << ctx.max_model_len
                    << ") on http://" << f.host << ":" << server.port()
                    << (f.api_key.empty() ? "" : " (API key required)");

  std::atomic<bool> shutting_down{false};
  std::thread signals(
      [&] { HandleSignals(set, server, async, f.shutdown_timeout, shutting_down); });
  server.Run();
  if (!shutting_down.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  PAGODA_LOG(kInfo) << "server stopped";
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& root, Action* action) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* app = root.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  flags->model.Add(app);
  flags->engine.Add(app);
  app->add_option("--host", flags->host, "address to listen on")->capture_default_str();
  app->add_option("--port", flags->port, "port to listen on (0: any free port, logged)")
      ->capture_default_str();
  app->add_option("--api-key", flags->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize");
  app->add_option("--served-model-name", flags->served_model_name,
                  "the model name clients use (default: --model)");
  app->add_option("--chat-template", flags->chat_template,
                  "a Jinja chat template file (overrides the model's)");
  app->add_option("--max-queue", flags->max_queue,
                  "waiting requests beyond this get 503 at once (0: no limit)")
      ->capture_default_str();
  app->add_option("--shutdown-timeout", flags->shutdown_timeout,
                  "seconds SIGINT/SIGTERM lets requests in flight finish before aborting them")
      ->capture_default_str();
  app->add_option("--http-threads", flags->http_threads, "connections served at once")
      ->capture_default_str();
  app->add_option("--stats-interval", flags->stats_interval,
                  "seconds between stats lines on stderr (0: none)")
      ->capture_default_str();
  app->add_option("--tool-call-parser", flags->tool_call_parser,
                  "parse chat answers into tool_calls: hermes, llama3_json, mistral, "
                  "deepseek_v3, deepseek_v31 (vLLM's names)");
  app->add_flag("--enable-auto-tool-choice", flags->enable_auto_tool_choice,
                "accepted for vLLM compatibility: --tool-call-parser already enables "
                "tool_choice \"auto\"");
  app->callback([flags, action] { *action = [flags] { return RunServe(*flags); }; });
}

}  // namespace pagoda::cli
