// Generator: runs one request to completion on a model (the `pagoda generate` path):
// prefill in chunks, then decode token by token, with the KV cache in blocks
// allocated as the sequence grows. The continuous-batching engine (scheduler, block
// pool, prefix cache) serves many requests; this is its single-request special case.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/params/sampling_params.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace pagoda {

struct GeneratorOptions {
  int64_t max_model_len = 0;   // 0: the model's max_position
  int64_t block_size = 16;
  DType kv_dtype = DType::kF32;  // f32 / bf16 / f16 cache (when kv_format is not set)
  // Any --kv-cache-dtype (quantized formats too), with its options; overrides kv_dtype.
  std::optional<KVCacheDType> kv_format;
  KVQuantOptions kv_quant;
  int64_t prefill_chunk = 512;  // tokens per forward during prefill
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // REQUIRES: not empty
  SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<int32_t> eos_ids;  // generation stops at any of these (not emitted)
  bool ignore_eos = false;
};

struct GenerateResult {
  std::vector<int32_t> output;            // generated ids, EOS excluded
  std::vector<TokenLogprobs> logprobs;    // one per output id when requested
  std::string finish_reason;              // "stop" (EOS) or "length"
};

class Generator {
 public:
  Generator(Model& model, const GeneratorOptions& options);

  int64_t max_model_len() const { return max_model_len_; }

  // on_token(id) is called for every emitted id (streaming). Throws InvalidArgument if
  // the prompt is empty or does not fit in max_model_len.
  GenerateResult Generate(const GenerateRequest& request,
                          const std::function<void(int32_t)>& on_token = nullptr);

 private:
  Model& model_;
  GeneratorOptions options_;
  int64_t max_model_len_;
  bool logged_kv_ = false;  // the "KV cache: ..." start-up line, once
};

}  // namespace pagoda
