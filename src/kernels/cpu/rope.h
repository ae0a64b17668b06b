// Applies RoPE in place to x: [num_tokens, num_heads, head_stride] (the rotated part
// starts at offset `offset` within each head), angle = position x inv_freq, computed
// in double so long positions keep their precision.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/params/rope_params.h"

namespace pagoda {

// cos/sin of every (token, frequency) of one batch, computed once and shared by every layer
// and by q and k: [num_tokens, rope.dim / 2] each, magnitude folded in.
struct RopeTable {
  int64_t half = 0;
  std::vector<float> cos, sin;
};
RopeTable MakeRopeTable(const RopeParams& rope, const int32_t* positions, int64_t num_tokens);
// The same into `table`, reusing its vectors (no allocation once they are large enough).
void FillRopeTable(const RopeParams& rope, const int32_t* positions, int64_t num_tokens, RopeTable* table);

void ApplyRope(const RopeParams& rope, const RopeTable& table, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x);

// The same, building the table on the fly.
void ApplyRope(const RopeParams& rope, const int32_t* positions, int64_t num_tokens,
               int64_t num_heads, int64_t head_stride, int64_t offset, float* x);

}  // namespace pagoda
