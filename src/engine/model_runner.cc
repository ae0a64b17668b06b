#include "engine/model_runner.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "engine/decode_padding.h"

namespace pagoda {

ModelRunner::ModelRunner(Model& model, KVCache& cache, const KVCacheManager& kv,
                         std::vector<int64_t> decode_batch_sizes, int32_t padding_block)
    : model_(model),
      cache_(cache),
      kv_(kv),
      decode_batch_sizes_(std::move(decode_batch_sizes)),
      padding_block_(padding_block) {
  PAGODA_CHECK(decode_batch_sizes_.empty() || padding_block_ >= kv_.num_blocks())
      << "ModelRunner: padded decode steps need a block outside the manager's";
}

void ModelRunner::AddPaddingRows(int64_t n, int64_t context) {
  const int64_t bs = kv_.block_size();
  padding_tokens_.assign(static_cast<size_t>(context), 0);
  padding_table_.assign(static_cast<size_t>((context + bs - 1) / bs), padding_block_);
  for (int64_t i = 0; i < n; ++i) builder_.AddLogits(builder_.AddSequence(padding_tokens_, context - 1, 1, padding_table_));
}

void ModelRunner::Forward(const StepDescription& step, int64_t num_sampled, StepResult* result) {
  Backend& backend = model_.backend();
  const int64_t vocab = model_.spec().vocab_size;
  const int64_t rows = step.num_logits();
  // Rows the backend samples in its own memory (only token ids come back), else host rows.
  const TensorView device_logits = backend.LogitsBuffer(rows, vocab);
  if (device_logits.data != nullptr) {
    model_.Forward(step, backend, cache_, device_logits);
    result->device_logits = device_logits.RowRange(0, num_sampled);
    return;
  }
  result->logits.resize(rows * vocab);
  model_.Forward(step, backend, cache_, TensorView::F32(result->logits.data(), rows, vocab));
  result->logits.resize(num_sampled * vocab);  // the padding rows' logits dropped
}

void ModelRunner::RunPaddingStep(int64_t batch, int64_t context) {
  PAGODA_CHECK(padding_block_ >= 0 && batch >= 1 && context >= 1) << "ModelRunner: no padding block";
  builder_.Reset(kv_.block_size());
  AddPaddingRows(1, context);
  AddPaddingRows(batch - 1, 1);
  StepResult ignored;
  Forward(builder_.Finish(), 0, &ignored);
}

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
  const int64_t vocab = model_.spec().vocab_size;
  const int64_t num_sampled = static_cast<int64_t>(result.sampled.size());
  if (prompt_rows_.empty()) {
    // A decode step (one token a sequence, every one sampled) runs at a padded batch size.
    bool decode = !decode_batch_sizes_.empty() && num_sampled == static_cast<int64_t>(out.scheduled.size());
    for (const ScheduledRequest& s : out.scheduled) decode = decode && s.num_tokens == 1;
    if (decode) AddPaddingRows(PaddedDecodeBatch(num_sampled, decode_batch_sizes_) - num_sampled, 1);
    Forward(builder_.Finish(), num_sampled, &result);
    return result;
  }
  for (int32_t i : prompt_rows_) builder_.AddLogits(i);
  const StepDescription& step = builder_.Finish();
  std::vector<float> all(step.num_logits() * vocab);
  model_.Forward(step, backend, cache_, TensorView::F32(all.data(), step.num_logits(), vocab));
  result.logits.assign(all.begin(), all.begin() + num_sampled * vocab);
  result.prompt_logits.assign(all.begin() + num_sampled * vocab, all.end());
  return result;
}

}  // namespace pagoda
