// Float64 reference of paged attention: plain softmax over each query's keys.
#pragma once

#include "kernels/params/attention_params.h"

namespace pagoda::ref {

// Same contract as PagedAttention; computes in double, stores f32.
void PagedAttention(const PagedAttentionParams& p);

}  // namespace pagoda::ref
