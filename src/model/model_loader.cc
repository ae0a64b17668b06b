// LoadModel: picks the loader for a --model argument.
#include <sys/stat.h>

#include "core/error.h"
#include "io/mapped_file.h"
#include "model/dummy_weights.h"
#include "model/gguf_loader.h"
#include "model/hf_loader.h"
#include "model/llama2c_loader.h"
#include "model/model.h"
#include "model/presets.h"

namespace pagoda {


namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::unique_ptr<Model> Load(const std::string& arg, const LoadOptions& options, Backend& backend) {
  if (arg.rfind("dummy:", 0) == 0) return MakeDummyModel(GetPreset(arg.substr(6)), options.dtype, options.seed, backend);
  struct stat st {};
  if (::stat(arg.c_str(), &st) != 0) {
    ThrowNotFound(arg + ": no such file or directory (expected a .gguf file, a llama2.c .bin, "
                        "a Hugging Face model directory, or dummy:<preset>)");
  }
  if (S_ISDIR(st.st_mode)) return LoadHfModel(arg, backend);
  if (EndsWith(arg, ".gguf")) return LoadGgufModel(arg, backend);
  // Sniff: GGUF files start with "GGUF" whatever their name.
  {
    MappedFile f(arg);
    if (f.size() >= 4 && std::string(reinterpret_cast<const char*>(f.data()), 4) == "GGUF") {
      return LoadGgufModel(arg, backend);
    }
  }
  return LoadLlama2cModel(arg, backend);
}

}  // namespace

std::unique_ptr<Model> LoadModel(const std::string& arg, const LoadOptions& options) {
  return Load(arg, options, options.backend != nullptr ? *options.backend : DefaultCpuBackend());
}

}  // namespace pagoda
