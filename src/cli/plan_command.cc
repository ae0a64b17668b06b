// Placeholder until the plan command lands.
#include "cli/commands.h"

namespace pagoda::cli {
void AddPlanCommand(CLI::App& root, Action* action) {}
}  // namespace pagoda::cli
