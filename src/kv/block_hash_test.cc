#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace pagoda {
namespace {

class BlockHashTest : public ::testing::TestWithParam<PrefixHashAlgo> {};

TEST_P(BlockHashTest, ChainsParentTokensAndExtraKeys) {
  const PrefixHashAlgo algo = GetParam();
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const std::vector<int32_t> b = {1, 2, 3, 5};
  const BlockHash ha = HashBlockTokens(algo, nullptr, a, "");
  EXPECT_EQ(ha, HashBlockTokens(algo, nullptr, a, ""));  // deterministic
  EXPECT_NE(ha, HashBlockTokens(algo, nullptr, b, ""));  // tokens matter
  EXPECT_NE(ha, HashBlockTokens(algo, nullptr, a, "tenant-1"));  // the salt matters
  EXPECT_NE(HashBlockTokens(algo, nullptr, a, "tenant-1"),
            HashBlockTokens(algo, nullptr, a, "tenant-2"));
  EXPECT_NE(HashBlockTokens(algo, &ha, a, ""), ha);  // the parent matters
  const BlockHash hb = HashBlockTokens(algo, nullptr, b, "");
  EXPECT_NE(HashBlockTokens(algo, &ha, a, ""), HashBlockTokens(algo, &hb, a, ""));
}

TEST_P(BlockHashTest, OnlyFullBlocksGetKeysAndSaltReachesEveryKey) {
  const PrefixHashAlgo algo = GetParam();
  std::vector<int32_t> tokens(10);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<BlockHash> plain, salted;
  ComputeBlockHashes(algo, tokens, 4, "", 100, &plain);
  ComputeBlockHashes(algo, tokens, 4, "salt", 100, &salted);
  ASSERT_EQ(plain.size(), 2u);  // 10 tokens: two full blocks of 4
  ASSERT_EQ(salted.size(), 2u);
  EXPECT_NE(plain[0], salted[0]);
  EXPECT_NE(plain[1], salted[1]);  // carried by the chain
  // Incremental extension gives the same keys as one pass.
  std::vector<BlockHash> inc;
  ComputeBlockHashes(algo, std::span(tokens).first(5), 4, "", 100, &inc);
  ASSERT_EQ(inc.size(), 1u);
  ComputeBlockHashes(algo, tokens, 4, "", 100, &inc);
  EXPECT_EQ(inc, plain);
  std::vector<BlockHash> capped;
  ComputeBlockHashes(algo, tokens, 4, "", 1, &capped);
  EXPECT_EQ(capped.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Algos, BlockHashTest,
                         ::testing::Values(PrefixHashAlgo::kSha256, PrefixHashAlgo::kXxh3_128),
                         [](const auto& info) { return std::string(PrefixHashAlgoName(info.param)); });

TEST(BlockHashKnownAnswerTest, Sha256OfTheCanonicalMessage) {
  // 40 zero bytes: a zero parent, u32 0 tokens, u32 0 extra-key bytes.
  EXPECT_EQ(HashBlockTokens(PrefixHashAlgo::kSha256, nullptr, {}, "").Hex(),
            "2c34ce1df23b838c5abf2a7f6437cca3d3067ed509ff25f11df6b11b582b51eb");
  // Zero parent, u32 2, int32 1, int32 2, u32 4, "salt" (all little-endian).
  const std::vector<int32_t> tokens = {1, 2};
  EXPECT_EQ(HashBlockTokens(PrefixHashAlgo::kSha256, nullptr, tokens, "salt").Hex(),
            "93133e140530f901f4bda6b1925bdd929dadd737f92a4406ea6a8d190c5a0925");
}

TEST(BlockHashTest, ParsesAlgoNames) {
  EXPECT_EQ(ParsePrefixHashAlgo("sha256"), PrefixHashAlgo::kSha256);
  EXPECT_EQ(ParsePrefixHashAlgo("xxhash"), PrefixHashAlgo::kXxh3_128);
  EXPECT_THROW(ParsePrefixHashAlgo("md5"), Error);
}

}  // namespace
}  // namespace pagoda
