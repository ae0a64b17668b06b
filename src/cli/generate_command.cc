// Placeholder until the generate command lands.
#include "cli/commands.h"

namespace pagoda::cli {
void AddGenerateCommand(CLI::App& root, Action* action) {}
}  // namespace pagoda::cli
