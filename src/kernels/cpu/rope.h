// Applies RoPE in place to x: [num_tokens, num_heads, head_stride] (the rotated part
// starts at offset `offset` within each head), angle = position x inv_freq, computed
// in double so long positions keep their precision.
#pragma once

#include <cstdint>

#include "kernels/params/rope_params.h"

namespace pagoda {

void ApplyRope(const RopeParams& rope, const int32_t* positions, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x);

}  // namespace pagoda
