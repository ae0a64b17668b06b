// The planner's --model resolver: a preset name, "dummy:<preset>", a bare config.json,
// a Hugging Face directory (its config.json) or a .gguf (SpecFromGguf). Shape only: no
// weights are read. (The engine's LoadModelSpec covers more formats; this one stays
// small so that `pagoda plan` works on a laptop without the weights.)
#pragma once

#include <string>

#include "model/model_spec.h"

namespace pagoda {

// Throws NotFound when `model_arg` is neither a preset nor an existing file/directory,
// and whatever the parser throws for a bad file.
ModelSpec ResolvePlanModel(const std::string& model_arg);

}  // namespace pagoda
