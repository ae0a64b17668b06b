// Placeholder until the bench command lands.
#include "cli/commands.h"

namespace pagoda::cli {
void AddBenchCommand(CLI::App& root, Action* action) {}
}  // namespace pagoda::cli
