// Helpers for golden and end-to-end tests: where the fixtures are, and running a
// whole sequence through a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace pagoda::testing {

// $PAGODA_FIXTURES, or ../shared/fixtures beside the repository root.
std::string FixturesDir();
// FixturesDir() + "/" + relative; fails the test (never skips) when the file is missing.
std::string Fixture(const std::string& relative);

// Runs `ids` through the model in chunks of `chunk` tokens with a fresh cache and
// returns the logits of every position [ids.size(), vocab].
std::vector<float> AllLogits(Model& model, const std::vector<int32_t>& ids, DType kv_dtype = DType::kF32,
                             int64_t block_size = 16, int64_t chunk = 1 << 30,
                             const ForwardObserver* observer = nullptr, KVStorage* cache_out = nullptr);

}  // namespace pagoda::testing
