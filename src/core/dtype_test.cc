#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace pagoda {
namespace {

// The Q8_0 codes of one block as ggml computes them: d = max|x| / 127, q = lround(x / d).
std::vector<int8_t> ReferenceQ8Codes(const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  std::vector<int8_t> q(32);
  for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(std::lround(x[i] * id));
  return q;
}

void ExpectCodes(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() / 32 * 34);
  QuantizeRow(DType::kQ8_0, x.data(), out.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const std::vector<int8_t> want = ReferenceQ8Codes(&x[b * 32]);
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(want[i], static_cast<int8_t>(out[b * 34 + 2 + i])) << "block " << b << " value " << x[b * 32 + i];
    }
  }
}

// Halves round away from zero, values just below a half round toward zero (x / d = x when
// max|x| = 127).
TEST(QuantizeRowTest, Q8CodesRoundHalfAwayFromZeroAsLround) {
  std::vector<float> x = {127.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 126.5f, -126.5f,
                          std::nextafter(0.5f, 0.0f), -std::nextafter(0.5f, 0.0f),
                          std::nextafter(2.5f, 0.0f), std::nextafter(2.5f, 3.0f), 0.0f, -0.0f};
  x.resize(32, 3.25f);
  ExpectCodes(x);
  std::vector<float> neg(x);
  for (float& v : neg) v = -v;
  ExpectCodes(neg);
}

TEST(QuantizeRowTest, Q8CodesMatchLroundOnRandomBlocks) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(32 * 512);
  for (float& v : x) v = dist(rng);
  for (size_t b = 0; b < 64; ++b) x[b * 32 + 3] = 0.0f;  // and some all-tiny blocks
  for (int i = 0; i < 32; ++i) x[100 * 32 + i] = 1e-30f * (i - 16);
  ExpectCodes(x);
}

TEST(QuantizeRowTest, Q8AllZeroBlockHasZeroScaleAndCodes) {
  std::vector<float> x(32, 0.0f);
  std::vector<uint8_t> out(34, 0xff);
  QuantizeRow(DType::kQ8_0, x.data(), out.data(), 32);
  for (uint8_t v : out) EXPECT_EQ(0, v);
}

}  // namespace
}  // namespace pagoda
