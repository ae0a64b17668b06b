#include "plan/model_source.h"

#include <filesystem>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/spec_loader.h"

namespace pagoda {

ModelSpec ResolvePlanModel(const std::string& model_arg) {
  std::string arg = model_arg;
  if (arg.starts_with("dummy:")) arg = arg.substr(6);
  if (HasPreset(arg)) return GetPreset(arg);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path(arg);
  if (fs::is_directory(path, ec)) return SpecFromHfConfigFile(arg);
  if (!fs::exists(path, ec)) {
    std::string known;
    for (const auto& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
    ThrowNotFound("--model: '" + model_arg + "' is neither a file, a directory nor a preset (" +
                  known + ")");
  }
  if (path.extension() == ".gguf") {
    GgufFile gguf(arg);
    return SpecFromGguf(gguf);
  }
  if (path.extension() == ".json") return SpecFromHfConfigFile(arg);
  ThrowUnsupported("--model: '" + model_arg +
                   "': the planner reads a .gguf, a config.json or a Hugging Face directory");
}

}  // namespace pagoda
