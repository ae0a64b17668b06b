// Builds a model from a GGUF file (architectures llama and qwen2), using the tensors in
// place from the memory map.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace pagoda {

std::unique_ptr<Model> LoadGgufModel(const std::string& path, Backend& backend = DefaultCpuBackend());

}  // namespace pagoda
