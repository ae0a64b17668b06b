// StepDescription: one engine step as flat arrays (vLLM's attention metadata), built once by
// StepBuilder and read by every layer and every backend (uploadable in one copy):
//
//   T tokens of S sequences, each sequence's new tokens contiguous and in position order.
//   token_ids[T]        the tokens fed in
//   positions[T]        their positions in their sequences
//   slot_mapping[T]     where each token's K/V goes: block_id * block_size + position % block_size
//   query_start_loc[S+1] sequence s owns tokens [query_start_loc[s], query_start_loc[s+1])
//   seq_lens[S]         tokens in sequence s's cache once this step has written its tokens
//   block_table[S][max_blocks_per_seq]  int32 block ids, row s = sequence s's table (-1 padded)
//   logits_indices[L]   tokens whose logits are wanted, in output order
//
// Who fills it: ModelRunner (the engine), Generator, the eval runner, bench latency and the
// tests, all through StepBuilder.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

struct StepDescription {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> query_start_loc;
  std::vector<int32_t> seq_lens;
  std::vector<int32_t> block_table;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 16;
  std::vector<int32_t> logits_indices;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t num_logits() const { return static_cast<int64_t>(logits_indices.size()); }
  const int32_t* table(int64_t seq) const { return block_table.data() + seq * max_blocks_per_seq; }
};

// Builds a StepDescription. Reset keeps the vectors' capacity, so a builder reused across
// steps stops allocating once it has seen its largest step.
class StepBuilder {
 public:
  void Reset(int64_t block_size);
  // Adds a sequence's tokens [first, first + count) of `tokens` (the sequence's ids from
  // position 0) with its block table `blocks` (ids of its blocks in order; at least enough for
  // position first + count - 1). Returns the step index of its first new token.
  // REQUIRES: count >= 1; first + count <= tokens.size(); between Reset and Finish.
  int64_t AddSequence(std::span<const int32_t> tokens, int64_t first, int64_t count,
                      std::span<const int32_t> blocks);
  // Asks for the logits of step token `index` (in the order of the calls).
  void AddLogits(int64_t index);
  // Lays out the block table (one row per sequence, as wide as the widest) and returns the step.
  const StepDescription& Finish();
  const StepDescription& step() const { return step_; }

 private:
  StepDescription step_;
  std::vector<int32_t> blocks_;        // the sequences' tables one after the other
  std::vector<int64_t> block_starts_;  // [S + 1] into blocks_
};

}  // namespace pagoda
