// Float64 reference of paged MLA attention (absorbed form): plain softmax over each
// query's keys, every product and sum in double. Quantized rows are decoded by the same row
// dequantizer as the kernel (kv/kv_codec.h, tested on its own), then widened.
#pragma once

#include "kernels/params/mla_attention_params.h"

namespace pagoda::ref {

// Same contract as pagoda::MlaAttention; computes in double, stores f32.
void MlaAttention(const MlaAttentionParams& p);

}  // namespace pagoda::ref
