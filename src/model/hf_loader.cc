// Hugging Face directories (config.json + *.safetensors): issue 4 fills this in.
#include <memory>
#include <string>

#include "core/error.h"
#include "model/model.h"

namespace pagoda {

std::unique_ptr<Model> LoadHfModel(const std::string& dir) {
  ThrowUnsupported(dir + ": Hugging Face safetensors models are not supported yet; use a GGUF file");
}

}  // namespace pagoda
