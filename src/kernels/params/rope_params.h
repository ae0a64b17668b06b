// Rotary position embedding: the rotation applied to the first `dim` values of each
// head. The frequencies are computed once from the model's RoPE settings (model/rope.h).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

struct RopeParams {
  std::vector<double> inv_freq;  // [dim / 2] radians per position for pair i
  int64_t dim = 0;               // rotated values per head (even; <= head_dim)
  bool interleaved = true;       // pairs (2i, 2i+1) if true, (i, i + dim/2) if false
  double magnitude = 1.0;        // YaRN's cos/sin scale (1 elsewhere)
};

}  // namespace pagoda
