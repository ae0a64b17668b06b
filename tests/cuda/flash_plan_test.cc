// FlashAttention's host-side planning (kernels/cuda/flash_plan.cu): the split shape's depth, the
// launch shape of a step, the wide shape's work items and their size by KV format, and which
// caches FlashAttention takes. No GPU needed: CI runs these (ctest `cuda_host_plans`), the device
// machine runs them with the rest of pagoda_cuda_tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/flash_attention.h"
#include "kernels/params/attention_params.h"
#include "kv/kv_format.h"

namespace pagoda {
namespace {

// The split shape's grid depth (FlashSplitDepth) covers every segment of every row a step may
// hold: rows from key 0 of 1..40000 keys, and rows of every window start (windows of 1..5000
// keys, positions up to 9000); a power of two of at most kFlashMaxSegments.
TEST(FlashPlanTest, SplitDepthCoversEverySegment) {
  auto segments = [](int64_t first, int64_t pos) {
    const int64_t seg = cuda::FlashSegmentKeys(first, pos);
    return pos / seg - first / seg + 1;
  };
  int64_t most = 0;
  for (int64_t keys = 1; keys <= 40000; ++keys) {
    most = std::max(most, segments(0, keys - 1));
    const int depth = cuda::FlashSplitDepth(keys);
    ASSERT_GE(depth, most) << keys << " keys";
    ASSERT_TRUE(std::has_single_bit(static_cast<unsigned>(depth)) && depth <= cuda::kFlashMaxSegments) << keys;
  }
  for (int64_t window = 1; window <= 5000; window += window < 300 ? 1 : 37) {
    for (int64_t pos = 0; pos <= 9000; pos += 1 + pos % 7) {
      const int64_t first = std::max<int64_t>(0, pos - window + 1);
      ASSERT_GE(cuda::FlashSplitDepth(pos + 1), segments(first, pos)) << "window " << window << " pos " << pos;
    }
  }
}

// The process-wide switches these tests set, back to their defaults whatever happens.
struct RestoreSwitches {
  ~RestoreSwitches() {
    cuda::SetFlashSplitMaxTokens(cuda::kFlashSplitMaxTokens);
    cuda::SetFlashKivi2Items(false);
    cuda::SetFlashWgmma(cuda::FlashWgmma::kAuto);
  }
};

// Split up to the limit (which SetFlashSplitMaxTokens clamps to [0, kFlashSplitMaxTokens]), then
// narrow for one token a sequence and wide otherwise; kivi2 takes the narrow shape for any
// longer step unless its work items are on.
TEST(FlashPlanTest, ChoosesTheShapeByTokensSequencesAndFormat) {
  RestoreSwitches restore;
  using cuda::FlashShape;
  cuda::SetFlashSplitMaxTokens(cuda::kFlashSplitMaxTokens);  // the defaults, whatever the environment set
  cuda::SetFlashKivi2Items(false);
  for (const KVQuant quant : {KVQuant::kNone, KVQuant::kFp8E4M3, KVQuant::kInt4, KVQuant::kKivi2}) {
    SCOPED_TRACE(KVQuantName(quant));
    EXPECT_EQ(cuda::ChooseFlashShape(1, 1, quant), FlashShape::kSplit);
    EXPECT_EQ(cuda::ChooseFlashShape(128, 1, quant), FlashShape::kSplit);  // a short prefill too
    EXPECT_EQ(cuda::ChooseFlashShape(129, 129, quant), FlashShape::kNarrow);
    const FlashShape prefill = quant == KVQuant::kKivi2 ? FlashShape::kNarrow : FlashShape::kWide;
    EXPECT_EQ(cuda::ChooseFlashShape(129, 2, quant), prefill);
    EXPECT_EQ(cuda::ChooseFlashShape(4096, 1, quant), prefill);
  }
  cuda::SetFlashKivi2Items(true);
  EXPECT_EQ(cuda::ChooseFlashShape(4096, 1, KVQuant::kKivi2), FlashShape::kWide);
  EXPECT_EQ(cuda::ChooseFlashShape(200, 200, KVQuant::kKivi2), FlashShape::kNarrow);  // decode stays narrow
  EXPECT_EQ(cuda::ChooseFlashShape(100, 2, KVQuant::kKivi2), FlashShape::kSplit);
  cuda::SetFlashSplitMaxTokens(0);
  EXPECT_EQ(cuda::FlashSplitMaxTokens(), 0);
  EXPECT_EQ(cuda::ChooseFlashShape(1, 1), FlashShape::kNarrow);
  EXPECT_EQ(cuda::ChooseFlashShape(64, 64), FlashShape::kNarrow);
  EXPECT_EQ(cuda::ChooseFlashShape(64, 3), FlashShape::kWide);
  cuda::SetFlashSplitMaxTokens(1000);  // past the scratch's size: clamped
  EXPECT_EQ(cuda::FlashSplitMaxTokens(), cuda::kFlashSplitMaxTokens);
  cuda::SetFlashSplitMaxTokens(-5);
  EXPECT_EQ(cuda::FlashSplitMaxTokens(), 0);
}

// Every sequence's tokens in runs of at most `per_item` tokens, each token in exactly one item of
// its own sequence, a sequence's last run first (its longest rows start early); ragged steps of
// 0..700-token sequences, runs of 1..128 tokens.
TEST(FlashPlanTest, WorkItemsCoverEachSequenceOnceLastRunFirst) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> starts = {0};
    const int seqs = 1 + static_cast<int>(rng() % 9);
    for (int s = 0; s < seqs; ++s) starts.push_back(starts.back() + static_cast<int32_t>(rng() % 701));
    const int64_t per_item = 1 + static_cast<int64_t>(rng() % 128);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(per_item) + " tokens an item");
    const std::vector<cuda::FlashWorkItem> items = cuda::FlashWorkItems(starts, per_item);
    std::vector<int> seen(starts.back(), 0);
    size_t at = 0;
    for (int s = 0; s < seqs; ++s) {
      int32_t stop = starts[s + 1];  // this sequence's items, from its end back to its start
      while (stop > starts[s]) {
        ASSERT_LT(at, items.size());
        const cuda::FlashWorkItem& it = items[at++];
        ASSERT_GT(it.num_tokens, 0);
        ASSERT_LE(it.num_tokens, per_item);
        ASSERT_EQ(it.first_token + it.num_tokens, stop) << "item " << at - 1;
        ASSERT_GE(it.first_token, starts[s]) << "an item crosses into the sequence before";
        for (int32_t t = it.first_token; t < stop; ++t) ++seen[t];
        stop = it.first_token;
      }
    }
    EXPECT_EQ(at, items.size());
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

PagedAttentionParams Params(KVQuant quant, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size) {
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = 8;
  shape.block_size = block_size;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.dtype = DType::kBF16;
  shape.quant = quant;
  const KVLayerFormats f = LayerKVFormats(shape, 0);
  PagedAttentionParams p;
  p.num_tokens = 300;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.kv_dtype = DType::kBF16;
  p.k_format = f.k;
  p.v_format = f.v;
  p.block_size = block_size;
  p.scale = 0.125f;
  return p;
}

// A wide work item is 64 query rows (four warps of 16 / G tokens), twice that where the wgmma
// kernel serves a bf16 step (two consumer warpgroups), and one warp's 16 / G tokens for kivi2
// (one-warp blocks).
TEST(FlashPlanTest, TokensPerItemByFormatAndKernel) {
  RestoreSwitches restore;
  for (const int64_t group : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{16}}) {
    SCOPED_TRACE(std::to_string(group) + " query heads a KV head");
    const int64_t per_warp = 16 / group;
    cuda::SetFlashWgmma(cuda::FlashWgmma::kOff);
    EXPECT_EQ(cuda::FlashTokensPerItem(Params(KVQuant::kNone, 2 * group, 2, 128, 16), 4096), 4 * per_warp);
    cuda::SetFlashWgmma(cuda::FlashWgmma::kOn);
    EXPECT_EQ(cuda::FlashTokensPerItem(Params(KVQuant::kNone, 2 * group, 2, 128, 16), 4096), 8 * per_warp);
    EXPECT_EQ(cuda::FlashTokensPerItem(Params(KVQuant::kInt4, 2 * group, 2, 128, 16), 4096), 4 * per_warp);
    EXPECT_EQ(cuda::FlashTokensPerItem(Params(KVQuant::kKivi2, 2 * group, 2, 128, 16), 4096), per_warp);
  }
}

// kivi2 on FlashAttention: its codes spans only (codes_only), paged blocks of 16+ slots, value
// groups of 32k values; FlashAttention refuses it otherwise (the SIMT kernel serves those).
TEST(FlashPlanTest, TakesKivi2CodesSpansOnly) {
  PagedAttentionParams p = Params(KVQuant::kKivi2, 8, 2, 128, 16);
  ASSERT_TRUE(p.k_format.per_channel);
  EXPECT_FALSE(cuda::FlashAttentionSupports(p)) << "every key of the window";
  p.codes_only = true;
  EXPECT_TRUE(cuda::FlashAttentionSupports(p));
  PagedAttentionParams small = Params(KVQuant::kKivi2, 8, 2, 128, 8);
  small.codes_only = true;
  EXPECT_FALSE(cuda::FlashAttentionSupports(small)) << "blocks of 8 slots";
  PagedAttentionParams odd = p;
  odd.v_format.group = 16;
  EXPECT_FALSE(cuda::FlashAttentionSupports(odd)) << "value groups of 16";
  PagedAttentionParams d64 = Params(KVQuant::kKivi2, 8, 2, 64, 32);
  d64.codes_only = true;
  EXPECT_TRUE(cuda::FlashAttentionSupports(d64));
}

}  // namespace
}  // namespace pagoda
