// pagoda bench: benchmarks, one sub-subcommand each: `bench serve` (an online-serving
// client, bench_serve_command.cc) and `bench latency` (bench_latency_command.cc).
#include "cli/commands.h"

namespace pagoda::cli {

void AddBenchCommand(CLI::App& root, Action* action) {
  CLI::App* bench =
      root.add_subcommand("bench", "benchmarks: serve (against a running server), latency");
  bench->require_subcommand(1);
  AddBenchServeCommand(bench, action);
  AddBenchLatencyCommand(bench, action);
}

}  // namespace pagoda::cli
