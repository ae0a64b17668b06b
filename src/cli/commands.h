// The `pagoda` subcommands. Each file adds one subcommand to the root CLI::App and,
// when that subcommand is chosen, its callback stores the action main() runs.
// Actions return the process exit code; pagoda::Error escapes to main(), which prints
// it on stderr and exits 1 (2 for bad flags).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace pagoda::cli {

using Action = std::function<int()>;

void AddGenerateCommand(CLI::App& root, Action* action);
void AddTokenizeCommand(CLI::App& root, Action* action);
void AddPlanCommand(CLI::App& root, Action* action);
void AddBenchCommand(CLI::App& root, Action* action);
void AddEvalCommand(CLI::App& root, Action* action);
// `pagoda eval loglikelihood` (eval_loglikelihood_command.cc). REQUIRES: AddEvalCommand first.
void AddEvalLoglikelihoodCommand(CLI::App& root, Action* action);
void AddServeCommand(CLI::App& root, Action* action);

// Sub-subcommands of `pagoda bench` (bench_command.cc adds `bench` and calls these).
void AddBenchServeCommand(CLI::App* bench, Action* action);
void AddBenchLatencyCommand(CLI::App* bench, Action* action);

}  // namespace pagoda::cli
