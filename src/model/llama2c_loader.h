// Builds a Llama model from a llama2.c checkpoint (float32, used in place).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace pagoda {

std::unique_ptr<Model> LoadLlama2cModel(const std::string& path, Backend& backend = DefaultCpuBackend());

}  // namespace pagoda
