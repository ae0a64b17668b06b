// Placeholder until the tokenize command lands.
#include "cli/commands.h"

namespace pagoda::cli {
void AddTokenizeCommand(CLI::App& root, Action* action) {}
}  // namespace pagoda::cli
