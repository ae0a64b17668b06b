#include "backend/step_description.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

void StepBuilder::Reset(int64_t block_size) {
  PAGODA_CHECK(block_size > 0) << "block size " << block_size;
  StepDescription& s = step_;
  s.token_ids.clear();
  s.positions.clear();
  s.slot_mapping.clear();
  s.query_start_loc.assign(1, 0);
  s.seq_lens.clear();
  s.block_table.clear();
  s.max_blocks_per_seq = 0;
  s.block_size = block_size;
  s.logits_indices.clear();
  blocks_.clear();
  block_starts_.assign(1, 0);
}

int64_t StepBuilder::AddSequence(std::span<const int32_t> tokens, int64_t first, int64_t count,
                                 std::span<const int32_t> blocks) {
  StepDescription& s = step_;
  const int64_t bs = s.block_size;
  PAGODA_CHECK(count >= 1 && first >= 0 && first + count <= static_cast<int64_t>(tokens.size()))
      << "StepBuilder: tokens [" << first << ", " << first + count << ") of a sequence of " << tokens.size();
  const int64_t needed = (first + count + bs - 1) / bs;
  PAGODA_CHECK(static_cast<int64_t>(blocks.size()) >= needed)
      << "StepBuilder: " << blocks.size() << " blocks for " << first + count << " positions";
  const int64_t index = s.num_tokens();
  for (int64_t pos = first; pos < first + count; ++pos) {
    s.token_ids.push_back(tokens[pos]);
    s.positions.push_back(static_cast<int32_t>(pos));
    s.slot_mapping.push_back(int64_t{blocks[pos / bs]} * bs + pos % bs);
  }
  s.query_start_loc.push_back(static_cast<int32_t>(s.num_tokens()));
  s.seq_lens.push_back(static_cast<int32_t>(first + count));
  blocks_.insert(blocks_.end(), blocks.begin(), blocks.begin() + needed);
  block_starts_.push_back(static_cast<int64_t>(blocks_.size()));
  return index;
}

void StepBuilder::AddLogits(int64_t index) {
  PAGODA_CHECK(index >= 0 && index < step_.num_tokens()) << "StepBuilder: logits of token " << index;
  step_.logits_indices.push_back(static_cast<int32_t>(index));
}

const StepDescription& StepBuilder::Finish() {
  StepDescription& s = step_;
  const int64_t num_seqs = s.num_seqs();
  int64_t width = 0;
  for (int64_t i = 0; i < num_seqs; ++i) width = std::max(width, block_starts_[i + 1] - block_starts_[i]);
  s.max_blocks_per_seq = width;
  s.block_table.assign(num_seqs * width, -1);
  for (int64_t i = 0; i < num_seqs; ++i) {
    std::copy(blocks_.begin() + block_starts_[i], blocks_.begin() + block_starts_[i + 1],
              s.block_table.begin() + i * width);
  }
  return s;
}

}  // namespace pagoda
