#include "engine/model_runner.h"

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
  for (const ScheduledRequest& s : out.scheduled) {
    Request& r = *s.request;
    const int32_t* table = kv_.GetBlockIds(r.id).data();
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t pos = r.num_computed_tokens + i;
      b.token_ids.push_back(r.tokens[pos]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.block_tables.push_back(table);
    }
    kv_.AppendSlotMapping(r.id, r.num_computed_tokens, s.num_tokens, &b.slot_mapping);
    if (r.num_computed_tokens + s.num_tokens == r.num_tokens()) {
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size() - 1));
      result.sampled.push_back(&r);
    }
  }
  if (b.token_ids.empty()) return result;
  result.logits.resize(result.sampled.size() * model_.spec().vocab_size);
  model_.Forward(b, cache_, result.logits.data());
  return result;
}

}  // namespace pagoda
