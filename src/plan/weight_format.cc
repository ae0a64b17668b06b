#include "plan/weight_format.h"

#include "core/error.h"

namespace pagoda {

namespace {
WeightFormat FromDType(DType t) {
  return {std::string(DTypeName(t)),
          static_cast<double>(DTypeBlockBytes(t)) / static_cast<double>(DTypeBlockSize(t)), false};
}
}  // namespace

WeightFormat ParseWeightFormat(std::string_view name, DType model_dtype) {
  if (name == "auto") return FromDType(model_dtype);
  if (name == "fp8" || name == "fp8_e4m3") return {"fp8", 1.0, true};
  if (name == "int8") return {"int8", 1.0 + 2.0 / 128, false};
  if (name == "int4") return {"int4", 0.5 + 2.0 / 128, false};
  static constexpr std::string_view kDTypes[] = {"bf16", "fp16", "f16", "f32",  "q8_0",
                                                 "q4_0", "q4_k", "q5_k", "q6_k"};
  for (std::string_view d : kDTypes) {
    if (name == d) return FromDType(ParseDType(name == "fp16" ? "f16" : name, "--weight-dtype"));
  }
  ThrowInvalidArgument("--weight-dtype: unknown value '" + std::string(name) +
                       "' (expected auto, bf16, fp16, f32, fp8, int8, int4, q8_0, q4_0, q4_k, "
                       "q5_k or q6_k)");
}

}  // namespace pagoda
