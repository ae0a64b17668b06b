// Reads a ModelSpec (shape only, no weights) from any --model argument:
// "dummy:<preset>" or a bare preset name, a .gguf file, a llama2.c .bin, a Hugging
// Face directory or its config.json.
#pragma once

#include <string>

#include "model/model_spec.h"

namespace pagoda {

class GgufFile;

ModelSpec LoadModelSpec(const std::string& model_arg);
// GGUF metadata -> ModelSpec (llama, qwen2, ... architectures). Throws naming the key.
ModelSpec SpecFromGguf(const GgufFile& gguf);
// HF config.json text (transformers 4 and 5 keys) -> ModelSpec. `source` names the file
// in errors. Implemented in hf_config.cc.
ModelSpec SpecFromHfConfig(const std::string& json_text, const std::string& source);

}  // namespace pagoda
