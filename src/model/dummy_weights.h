// Deterministic random weights of a preset's shape ("dummy:<preset>", vLLM's
// --load-format dummy), for benchmarks of large shapes and for runs without files.
// The same preset, dtype and seed always give the same bytes.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace pagoda {

// dtype: bf16 (default), f16, f32, q8_0 or q4_0. Throws InvalidArgument otherwise.
std::unique_ptr<Model> MakeDummyModel(const ModelSpec& spec, const std::string& dtype, uint64_t seed,
                                      Backend& backend = DefaultCpuBackend());

}  // namespace pagoda
