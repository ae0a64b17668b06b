// QuantizeActivations: every ISA level gives the portable level's codes, scales and sums
// bit for bit (random blocks, exact .5 ties, zero blocks, huge values), and the codes
// follow the definition d = max|x| / 127, q = round-half-away(x / d).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul_internal.h"

namespace pagoda::matmul_internal {
namespace {

std::vector<float> Blocks(uint32_t seed, int64_t num_tokens, int64_t cols) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(num_tokens * cols);
  for (auto& v : x) v = dist(rng);
  // Block 0 of token 0: max 127 so d = 1 and x / d hits exact ties.
  const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -126.5f, 3.4999998f, -0.0f};
  for (int i = 0; i < 9 && i < cols; ++i) x[i] = ties[i];
  // Block 1: all zero. Block 2: huge values.
  if (cols >= 96) {
    for (int i = 32; i < 64; ++i) x[i] = 0.0f;
    for (int i = 64; i < 96; ++i) x[i] = (i % 2 ? 1 : -1) * (3e38f / 32.0f) * static_cast<float>(i - 63);
  }
  return x;
}

TEST(QuantizeActivationsTest, EveryLevelMatchesThePortableOneBitForBit) {
  const int64_t num_tokens = 7, cols = 4096 + 64;
  const std::vector<float> x = Blocks(3, num_tokens, cols);
  QuantizedActivations want;
  QuantizeActivationsAt(IsaLevel::kGeneric, x.data(), num_tokens, cols, true, &want, true);
  for (IsaLevel level : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (!IsaLevelSupported(level)) continue;  // the levels this CPU runs
    QuantizedActivations got;
    QuantizeActivationsAt(level, x.data(), num_tokens, cols, true, &got, true);
    EXPECT_EQ(got.q, want.q) << IsaLevelName(level);
    EXPECT_EQ(got.d, want.d) << IsaLevelName(level);
    EXPECT_EQ(got.bias128, want.bias128) << IsaLevelName(level);
    EXPECT_EQ(got.offset_sums, want.offset_sums) << IsaLevelName(level);
  }
}

TEST(QuantizeActivationsTest, CodesFollowTheDefinition) {
  const int64_t cols = 128;
  const std::vector<float> x = Blocks(4, 1, cols);
  QuantizedActivations xq;
  QuantizeActivations(x.data(), 1, cols, false, &xq, true);
  for (int64_t b = 0; b < cols / 32; ++b) {
    double amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{x[b * 32 + i]}));
    const float d = static_cast<float>(amax) / 127.0f;
    ASSERT_EQ(xq.d[b], d);
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float v = d != 0 ? x[b * 32 + i] * (1.0f / d) : 0.0f;
      const double r = std::trunc(v) + (std::fabs(v - std::trunc(v)) >= 0.5 ? (v < 0 ? -1 : 1) : 0);
      ASSERT_EQ(xq.q[b * 32 + i], static_cast<int8_t>(std::clamp(r, -127.0, 127.0))) << b << " " << i;
      sum += xq.q[b * 32 + i];
    }
    EXPECT_EQ(xq.bias128[b], -128 * sum);
  }
  // The ties of block 0: 2.5 -> 3, -2.5 -> -3, 0.5 -> 1, -0.5 -> -1, 1.5 -> 2, -126.5 -> -127.
  EXPECT_EQ(xq.q[1], 3);
  EXPECT_EQ(xq.q[2], -3);
  EXPECT_EQ(xq.q[3], 1);
  EXPECT_EQ(xq.q[4], -1);
  EXPECT_EQ(xq.q[5], 2);
  EXPECT_EQ(xq.q[6], -127);
  EXPECT_EQ(xq.q[7], 3);
}

}  // namespace
}  // namespace pagoda::matmul_internal
