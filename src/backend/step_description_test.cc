#include "backend/step_description.h"

#include <gtest/gtest.h>

#include <vector>


namespace pagoda {
namespace {

TEST(StepBuilderTest, TwoSequencesLaidOutFlat) {
  StepBuilder b;
  b.Reset(4);
  // Sequence A: 6 tokens, positions 0..5 new (a prefill); blocks 7, 2.
  const std::vector<int32_t> a{10, 11, 12, 13, 14, 15};
  const std::vector<int32_t> a_blocks{7, 2};
  // Sequence B: 10 tokens, position 9 new (a decode); blocks 5, 1, 3 (and a spare 9).
  const std::vector<int32_t> bt{20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  const std::vector<int32_t> b_blocks{5, 1, 3, 9};
  EXPECT_EQ(b.AddSequence(a, 0, 6, a_blocks), 0);
  EXPECT_EQ(b.AddSequence(bt, 9, 1, b_blocks), 6);
  b.AddLogits(5);
  b.AddLogits(6);
  const StepDescription& s = b.Finish();
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 29}));
  EXPECT_EQ(s.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 9}));
  EXPECT_EQ(s.slot_mapping, (std::vector<int64_t>{28, 29, 30, 31, 8, 9, 13}));
  EXPECT_EQ(s.query_start_loc, (std::vector<int32_t>{0, 6, 7}));
  EXPECT_EQ(s.seq_lens, (std::vector<int32_t>{6, 10}));
  // Rows as wide as the widest table in use (B needs 3 blocks for 10 positions), -1 padded.
  EXPECT_EQ(s.max_blocks_per_seq, 3);
  EXPECT_EQ(s.block_table, (std::vector<int32_t>{7, 2, -1, 5, 1, 3}));
  EXPECT_EQ(s.logits_indices, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(s.table(1)[2], 3);
  EXPECT_EQ(s.num_tokens(), 7);
  EXPECT_EQ(s.num_seqs(), 2);
  EXPECT_EQ(s.num_logits(), 2);
}

TEST(StepBuilderTest, ResetStartsAnEmptyStepAndKeepsCapacity) {
  StepBuilder b;
  b.Reset(16);
  const std::vector<int32_t> t(100, 3), blocks{0, 1, 2, 3, 4, 5, 6};
  b.AddSequence(t, 0, 100, blocks);
  b.AddLogits(99);
  b.Finish();
  const size_t capacity = b.step().token_ids.capacity();
  b.Reset(16);
  EXPECT_EQ(b.step().num_tokens(), 0);
  EXPECT_EQ(b.step().num_logits(), 0);
  EXPECT_EQ(b.step().query_start_loc, std::vector<int32_t>{0});
  EXPECT_EQ(b.step().token_ids.capacity(), capacity);
}

// Misuse is a bug in the caller (the engine builds steps from its own bookkeeping): it aborts
// with the reason, as every PAGODA_CHECK does.
TEST(StepBuilderDeathTest, RejectsTooFewBlocksAndEmptyRanges) {
  StepBuilder b;
  b.Reset(4);
  const std::vector<int32_t> t(9, 1), two{0, 1}, three{0, 1, 2};
  EXPECT_DEATH(b.AddSequence(t, 0, 9, two), "2 blocks for 9 positions");  // 3 blocks of 4 needed
  EXPECT_DEATH(b.AddSequence(t, 0, 0, three), "tokens \\[0, 0\\)");
  EXPECT_DEATH(b.AddSequence(t, 5, 5, three), "of a sequence of 9");  // past the sequence's tokens
  EXPECT_DEATH(b.AddLogits(0), "logits of token 0");                 // no token yet
  EXPECT_EQ(b.AddSequence(t, 0, 9, three), 0);
  EXPECT_DEATH(b.AddLogits(9), "logits of token 9");
}

}  // namespace
}  // namespace pagoda
