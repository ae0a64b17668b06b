// pagoda: the command-line entry point. Parses flags with CLI11, runs the chosen
// subcommand, and turns pagoda::Error into a message on stderr and an exit code.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"pagoda: an LLM inference engine built around the KV cache"};
  app.require_subcommand(1);
  pagoda::cli::Action action;
  pagoda::cli::AddGenerateCommand(app, &action);
  pagoda::cli::AddTokenizeCommand(app, &action);
  pagoda::cli::AddPlanCommand(app, &action);
  pagoda::cli::AddBenchCommand(app, &action);
  pagoda::cli::AddEvalCommand(app, &action);
  pagoda::cli::AddEvalLoglikelihoodCommand(app, &action);
  pagoda::cli::AddServeCommand(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return action ? action() : 0;
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "pagoda: error: %s\n", e.what());
    return 1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagoda: internal error: %s\n", e.what());
    return 3;
  }
}
