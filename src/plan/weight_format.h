// How many bytes a weight takes, for `--weight-dtype` in the planner.
#pragma once

#include <string>
#include <string_view>

#include "core/dtype.h"

namespace pagoda {

struct WeightFormat {
  std::string name;             // as printed: "bf16", "fp8", "int4", "q4_k", ...
  double bytes_per_param = 2;   // including per-group scales
  bool fp8_compute = false;     // matmuls can run on FP8 tensor cores (fp8 weights)
};

// "auto" -> the model's own dtype (`model_dtype`); bf16, fp16, f32; fp8 (1 byte, its
// 128x128 block scales are negligible); int8 (1 byte + an f16 scale per 128); int4
// (AWQ/GPTQ-style: 1/2 byte + an f16 scale per group of 128); and the GGUF types by
// their block layouts (q8_0, q4_0, q4_k, q5_k, q6_k). Throws InvalidArgument.
WeightFormat ParseWeightFormat(std::string_view name, DType model_dtype);

}  // namespace pagoda
