#include "engine/generator.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "kv/kv_cache_config.h"

namespace pagoda {

Generator::Generator(Model& model, const GeneratorOptions& options)
    : model_(model), options_(options) {
  max_model_len_ = options.max_model_len > 0 ? options.max_model_len : model.spec().max_position;
  PAGODA_ENSURE(options_.block_size > 0 && (options_.block_size & (options_.block_size - 1)) == 0 &&
                    options_.block_size <= 256,
                ErrorCode::kInvalidArgument,
                "--block-size must be a power of two from 1 to 256 (got " << options_.block_size << ")");
}

GenerateResult Generator::Generate(const GenerateRequest& req, const std::function<void(int32_t)>& on_token) {
  const int64_t prompt_len = static_cast<int64_t>(req.prompt.size());
  PAGODA_ENSURE(prompt_len > 0, ErrorCode::kInvalidArgument, "the prompt is empty");
  PAGODA_ENSURE(prompt_len < max_model_len_, ErrorCode::kInvalidArgument,
                "the prompt has " << prompt_len << " tokens, which does not leave room for output in "
                                  << "max_model_len " << max_model_len_ << " (raise --max-model-len)");
  PAGODA_ENSURE(req.max_tokens >= 1, ErrorCode::kInvalidArgument,
                "max_tokens must be at least 1 (got " << req.max_tokens << ")");
  req.sampling.Validate();
  const int64_t vocab = model_.spec().vocab_size;
  const int64_t bs = options_.block_size;
  // One sequence: the most positions it can hold is max_model_len - 1 (the last token is
  // never fed back).
  const int64_t num_blocks = (max_model_len_ + bs - 1) / bs;
  const KVCacheDType format = options_.kv_format ? *options_.kv_format
                             : options_.kv_dtype == DType::kF32 ? KVCacheDType::kF32
                             : options_.kv_dtype == DType::kF16 ? KVCacheDType::kF16
                                                                : KVCacheDType::kBF16;
  KVQuantOptions quant = options_.kv_quant;
  quant.block_size = bs;
  std::unique_ptr<KVCache> cache_ptr = model_.backend().CreateKVCache(ApplyKVCacheFormat(
      model_.KVShapeFor(num_blocks, bs, KVStorageDType(format)), format, quant, model_.spec().kv_shape().mla));
  KVCache& cache = *cache_ptr;
  model_.ReserveWorkspace(std::min(options_.prefill_chunk, prompt_len), 1);
  if (!logged_kv_) {
    logged_kv_ = true;
    KVCacheConfig c;
    c.num_blocks = num_blocks;
    c.block_size = bs;
    c.bytes_per_token = cache.bytes() / (num_blocks * bs);
    c.max_model_len = max_model_len_;
    c.dtype = format;
    PAGODA_LOG(kInfo) << FormatKVCacheConfig(c);
  }
  std::vector<int32_t> block_table(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) block_table[i] = static_cast<int32_t>(i);

  Backend& backend = model_.backend();
  std::unique_ptr<SamplerState> sampler = backend.CreateSampler(req.sampling);
  GenerateResult result;
  std::vector<int32_t> tokens = req.prompt;
  std::vector<float> logits(vocab);
  int64_t computed = 0;
  StepBuilder builder;
  while (true) {
    // Feed every token not yet in the cache (the prompt in chunks, then one at a time).
    const int64_t total = static_cast<int64_t>(tokens.size());
    while (computed < total) {
      const int64_t n = std::min(options_.prefill_chunk, total - computed);
      const bool last = computed + n == total;
      ForwardSequence(model_, cache, builder, tokens, computed, n, block_table,
                      last ? LogitRows::kLast : LogitRows::kNone, logits.data());
      computed += n;
    }
    TokenLogprobs lp;
    SampleRow sample;
    sample.state = sampler.get();
    sample.prompt = req.prompt;
    sample.output = result.output;
    sample.logprobs = req.sampling.logprobs >= 0 ? &lp : nullptr;
    backend.Sample(TensorView::F32(logits.data(), 1, vocab), std::span<SampleRow>(&sample, 1));
    const int32_t id = sample.token;
    const bool is_eos = !req.ignore_eos && std::find(req.eos_ids.begin(), req.eos_ids.end(), id) != req.eos_ids.end();
    if (is_eos) {
      result.finish_reason = "stop";
      break;
    }
    result.output.push_back(id);
    if (req.sampling.logprobs >= 0) result.logprobs.push_back(std::move(lp));
    tokens.push_back(id);
    if (on_token) on_token(id);
    if (static_cast<int64_t>(result.output.size()) >= req.max_tokens ||
        static_cast<int64_t>(tokens.size()) >= max_model_len_) {
      result.finish_reason = "length";
      break;
    }
  }
  return result;
}

}  // namespace pagoda
