#include "engine/model_runner.h"

#include <algorithm>

namespace pagoda {

ModelRunner::ModelRunner(Model& model, KVCache& cache, const KVCacheManager& kv)
    : model_(model), cache_(cache), kv_(kv) {}

ModelRunner::StepResult ModelRunner::Execute(const SchedulerOutput& out) {
  Backend& backend = model_.backend();
  for (const BlockCopy& c : out.copies) backend.CopyBlock(cache_, c.src_block_id, c.dst_block_id);
  builder_.Reset(kv_.block_size());
  StepResult result;
  prompt_rows_.clear();  // step indices of prompt logits, after the sampled ones
  for (const ScheduledRequest& s : out.scheduled) {
    Request& r = *s.request;
    const int64_t first_index =
        builder_.AddSequence(r.tokens, r.num_computed_tokens, s.num_tokens, kv_.GetBlockIds(r.id));
    if (r.spec.want_prompt_logits) {
      const int64_t end = std::min(r.num_computed_tokens + s.num_tokens, r.num_prompt_tokens - 1);
      if (end > r.num_computed_tokens) {
        result.prompt_rows.push_back({&r, r.num_computed_tokens, end - r.num_computed_tokens});
        for (int64_t p = r.num_computed_tokens; p < end; ++p) {
          prompt_rows_.push_back(static_cast<int32_t>(first_index + p - r.num_computed_tokens));
        }
      }
    }
    if (r.num_computed_tokens + s.num_tokens == r.num_tokens()) {
      builder_.AddLogits(first_index + s.num_tokens - 1);
      result.sampled.push_back(&r);
    }
  }
  if (out.scheduled.empty()) return result;
  for (int32_t i : prompt_rows_) builder_.AddLogits(i);
  const StepDescription& step = builder_.Finish();
  const int64_t vocab = model_.spec().vocab_size;
  const int64_t num_sampled = static_cast<int64_t>(result.sampled.size());
  if (prompt_rows_.empty()) {
    // Rows the backend samples in its own memory (only token ids come back), else host rows.
    const TensorView device_logits = backend.LogitsBuffer(num_sampled, vocab);
    if (device_logits.data != nullptr) {
      model_.Forward(step, backend, cache_, device_logits);
      result.device_logits = device_logits;
      return result;
    }
    result.logits.resize(num_sampled * vocab);
    model_.Forward(step, backend, cache_, TensorView::F32(result.logits.data(), num_sampled, vocab));
    return result;
  }
  std::vector<float> all(step.num_logits() * vocab);
  model_.Forward(step, backend, cache_, TensorView::F32(all.data(), step.num_logits(), vocab));
  result.logits.assign(all.begin(), all.begin() + num_sampled * vocab);
  result.prompt_logits.assign(all.begin() + num_sampled * vocab, all.end());
  return result;
}

}  // namespace pagoda
