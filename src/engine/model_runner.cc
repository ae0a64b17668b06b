#include "engine/model_runner.h"

#include <algorithm>

namespace pagoda {

ModelRunner::ModelRunner(Model& model, KVStorage& cache, const KVCacheManager& kv)
    : model_(model), cache_(cache), kv_(kv) {}

ModelRunner::StepResult ModelRunner::Execute(const SchedulerOutput& out) {
  for (const BlockCopy& c : out.copies) cache_.CopyBlock(c.src_block_id, c.dst_block_id);
  ForwardBatch& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.slot_mapping.clear();
  b.block_tables.clear();
  b.logits_indices.clear();
  StepResult result;
  std::vector<int32_t> prompt_indices;  // rows of prompt logits, after the sampled ones
  for (const ScheduledRequest& s : out.scheduled) {
    Request& r = *s.request;
    const int32_t* table = kv_.GetBlockIds(r.id).data();
    const int64_t first_index = static_cast<int64_t>(b.token_ids.size());
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t pos = r.num_computed_tokens + i;
      b.token_ids.push_back(r.tokens[pos]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.block_tables.push_back(table);
    }
    kv_.AppendSlotMapping(r.id, r.num_computed_tokens, s.num_tokens, &b.slot_mapping);
    if (r.spec.want_prompt_logits) {
      const int64_t end = std::min(r.num_computed_tokens + s.num_tokens, r.num_prompt_tokens - 1);
      if (end > r.num_computed_tokens) {
        result.prompt_rows.push_back({&r, r.num_computed_tokens, end - r.num_computed_tokens});
        for (int64_t p = r.num_computed_tokens; p < end; ++p) {
          prompt_indices.push_back(static_cast<int32_t>(first_index + p - r.num_computed_tokens));
        }
      }
    }
    if (r.num_computed_tokens + s.num_tokens == r.num_tokens()) {
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size() - 1));
      result.sampled.push_back(&r);
    }
  }
  if (b.token_ids.empty()) return result;
  const int64_t vocab = model_.spec().vocab_size;
  const int64_t num_sampled = static_cast<int64_t>(result.sampled.size());
  if (prompt_indices.empty()) {
    result.logits.resize(num_sampled * vocab);
    model_.Forward(b, cache_, result.logits.data());
    return result;
  }
  b.logits_indices.insert(b.logits_indices.end(), prompt_indices.begin(), prompt_indices.end());
  std::vector<float> all(static_cast<int64_t>(b.logits_indices.size()) * vocab);
  model_.Forward(b, cache_, all.data());
  result.logits.assign(all.begin(), all.begin() + num_sampled * vocab);
  result.prompt_logits.assign(all.begin() + num_sampled * vocab, all.end());
  return result;
}

}  // namespace pagoda
