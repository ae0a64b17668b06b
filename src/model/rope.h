// RoPE frequencies from a model's RopeSpec: plain, linear, llama3 and YaRN scaling,
// and per-frequency factors read from a file (GGUF rope_freqs.weight).
#pragma once

#include "kernels/params/rope_params.h"
#include "model/model_spec.h"

namespace pagoda {

RopeParams MakeRopeParams(const RopeSpec& spec);

// YaRN's magnitude correction: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
double YarnMscale(double scale, double mscale);

}  // namespace pagoda
