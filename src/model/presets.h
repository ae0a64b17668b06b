// Named model shapes ("dummy:<preset>" and the planner's --model), one table shared by
// the engine and the planner. Shapes are the published configurations.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/model_spec.h"

namespace pagoda {

// Throws InvalidArgument listing the known names when `name` is not a preset.
ModelSpec GetPreset(std::string_view name);
bool HasPreset(std::string_view name);
std::vector<std::string> PresetNames();

}  // namespace pagoda
