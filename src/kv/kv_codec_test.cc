// Round trips of every quantized KV format on random rows with outliers, zeros and
// subnormals, against per-format error bounds stated in terms of each scale group's range.
#include "kv/kv_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace pagoda {
namespace {

KVArrayFormat Format(KVQuant q, int64_t d, int64_t group = 32, bool per_channel = false) {
  KVArrayFormat f;
  f.quant = q;
  f.block_size = 16;
  f.num_heads = 2;
  f.head_dim = d;
  f.group = group;
  f.per_channel = per_channel;
  return f;
}

// [block_size, num_heads, d]: unit normals, a few outliers (x50), exact zeros, subnormals,
// and one all-zero row.
std::vector<float> Data(const KVArrayFormat& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(f.block_size * f.num_heads * f.head_dim);
  for (float& v : x) {
    v = normal(rng);
    const int r = static_cast<int>(rng() % 100);
    if (r < 3)
      v *= 50.0f;
    else if (r < 8)
      v = 0.0f;
    else if (r < 11)
      v = 1e-40f * static_cast<float>(rng() % 7);
  }
  std::fill_n(x.begin() + f.head_dim, f.head_dim, 0.0f);  // token 0, head 1
  return x;
}

// Bound on |x - q(x)| for a value of a group whose absolute max is amax and range
// (max - min) is range.
double Bound(KVQuant q, double x, double amax, double range) {
  switch (q) {
    case KVQuant::kFp8E4M3: return std::fabs(x) / 16 + amax / 448 / 1024 + 1e-30;
    case KVQuant::kFp8E5M2: return std::fabs(x) / 8 + amax / 57344 / 65536 + 1e-30;
    case KVQuant::kInt8: return 0.501 * amax / 127 + 3e-8 * 127;
    case KVQuant::kInt4: return 0.501 * amax / 7 + 3e-8 * 7;
    // Spacing 2 at the top of E2M1 (4..6) with a scale rounded to e4m3 (2^-4 relative),
    // and e4m3's smallest scale 2^-9 for small groups (per-tensor scale 1).
    case KVQuant::kNvfp4: return 0.19 * amax + 6 * std::ldexp(1.0, -10);
    case KVQuant::kKivi2: return 0.168 * range + amax * std::ldexp(1.0, -10) + 1e-7;
    default: return 0;
  }
}

void CheckRoundTrip(const KVArrayFormat& f, uint64_t seed) {
  const std::vector<float> x = Data(f, seed);
  std::vector<uint8_t> block(KVBlockBytes(f), 0xAB);
  QuantizeKVBlock(f, x.data(), block.data());
  const int64_t d = f.head_dim, h = f.num_heads;
  std::vector<float> out(d);
  const int64_t g = f.quant == KVQuant::kNvfp4 ? 16 : std::min(f.group, d);
  for (int64_t t = 0; t < f.block_size; ++t) {
    for (int64_t k = 0; k < h; ++k) {
      DequantizeKVRow(f, block.data(), t, k, out.data());
      const float* row = &x[(t * h + k) * d];
      for (int64_t i = 0; i < d; ++i) {
        // The scale group of value i: per channel over the block's tokens, or per token
        // over g neighbouring values (fp8: the whole row).
        std::vector<float> grp;
        if (f.per_channel) {
          for (int64_t u = 0; u < f.block_size; ++u) grp.push_back(x[(u * h + k) * d + i]);
        } else if (f.quant == KVQuant::kFp8E4M3 || f.quant == KVQuant::kFp8E5M2) {
          grp.assign(row, row + d);
        } else {
          const int64_t a = i / g * g;
          grp.assign(row + a, row + std::min(d, a + g));
        }
        double amax = 0, lo = INFINITY, hi = -INFINITY;
        for (float v : grp) {
          amax = std::max(amax, std::fabs(double{v}));
          lo = std::min(lo, double{v});
          hi = std::max(hi, double{v});
        }
        ASSERT_LE(std::fabs(double{out[i]} - row[i]), Bound(f.quant, row[i], amax, hi - lo))
            << "token " << t << " head " << k << " value " << i << ": " << row[i] << " -> "
            << out[i];
        if (row[i] == 0.0f && f.quant != KVQuant::kKivi2) ASSERT_EQ(out[i], 0.0f);
      }
    }
  }
}

TEST(KVQuantTest, RoundTripWithinBoundsEveryFormat) {
  for (KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4,
                    KVQuant::kNvfp4, KVQuant::kKivi2}) {
    for (int64_t d : {8, 64, 80, 128}) {
      for (int64_t group : {16, 32, 128}) {
        SCOPED_TRACE(::testing::Message()
                     << "quant " << int(q) << " d " << d << " group " << group);
        CheckRoundTrip(Format(q, d, group), 7 + d + group);
      }
    }
  }
  for (int64_t d : {8, 64, 80}) CheckRoundTrip(Format(KVQuant::kKivi2, d, 32, true), 3 + d);
}

TEST(KVQuantTest, Fp8StaticScaleIsUsedAndSaturates) {
  KVArrayFormat f = Format(KVQuant::kFp8E4M3, 8);
  f.tensor_scale = 0.5f;  // representable: |x| <= 224
  std::vector<float> x = {1.0f, -2.0f, 100.0f, 1000.0f, -1e9f, 0.0f, 0.25f, 3.0f};
  std::vector<uint8_t> block(KVBlockBytes(f));
  QuantizeKVRow(f, x.data(), block.data(), 0, 0);
  std::vector<float> out(8);
  DequantizeKVRow(f, block.data(), 0, 0, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[2], 96.0f);   // 200: a tie between 192 and 208, to even (192); x 0.5
  EXPECT_EQ(out[3], 224.0f);  // saturated at 448 x 0.5, not NaN
  EXPECT_EQ(out[4], -224.0f);
  EXPECT_EQ(out[5], 0.0f);
}

TEST(KVQuantTest, BlockBytesMatchTheLayoutComment) {
  // llama-gqa: d = 64, 2 KV heads, block 16.
  auto per_token = [](KVArrayFormat f) { return KVBlockBytes(f) / f.block_size / f.num_heads; };
  EXPECT_EQ(per_token(Format(KVQuant::kFp8E4M3, 64)), 68);
  EXPECT_EQ(per_token(Format(KVQuant::kInt8, 64)), 64 + 4);
  EXPECT_EQ(per_token(Format(KVQuant::kInt4, 64)), 32 + 4);
  EXPECT_EQ(per_token(Format(KVQuant::kNvfp4, 64)), 32 + 4);
  EXPECT_EQ(per_token(Format(KVQuant::kKivi2, 64)), 16 + 8);
  EXPECT_EQ(per_token(Format(KVQuant::kKivi2, 64, 32, true)), 16 + 16);
  EXPECT_EQ(KVBlockBytes(Format(KVQuant::kKivi2, 80, 32, true)) % 16, 0);
}

// Quantized blocks are head-major: row (offset, head) is row head x block_size + offset, so a
// head's rows of the block are one run of bytes (the GPU copies it whole); writing a row
// touches its own bytes only, and reading it back gives what the row's own codes give. kNone
// rows stay token-major.
TEST(KVQuantTest, QuantizedBlocksAreHeadMajor) {
  for (const KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4,
                          KVQuant::kKivi2}) {
    SCOPED_TRACE(static_cast<int>(q));
    KVArrayFormat f = Format(q, 64);
    f.num_heads = 3;
    const int64_t rb = KVRowBytes(f);
    EXPECT_EQ(KVRowIndex(f, 5, 2), 2 * f.block_size + 5);
    const std::vector<float> x = Data(f, 7);
    std::vector<uint8_t> block(KVBlockBytes(f), 0xAB);
    const int64_t offset = 9, head = 1;
    QuantizeKVRow(f, x.data(), block.data(), offset, head);
    const int64_t at = (head * f.block_size + offset) * rb;
    for (int64_t i = 0; i < static_cast<int64_t>(block.size()); ++i) {
      if (i < at || i >= at + rb) ASSERT_EQ(block[i], 0xAB) << "byte " << i << " outside row (9, 1)";
    }
    // The row read from a block of its bytes alone at head 0, offset 0 (the start of the block).
    std::vector<uint8_t> alone(KVBlockBytes(f), 0);
    std::copy_n(block.begin() + at, rb, alone.begin());
    std::vector<float> a(f.head_dim), b(f.head_dim);
    DequantizeKVRow(f, block.data(), offset, head, a.data());
    DequantizeKVRow(f, alone.data(), 0, 0, b.data());
    EXPECT_EQ(a, b);
  }
  KVArrayFormat plain = Format(KVQuant::kNone, 64);
  plain.dtype = DType::kBF16;
  plain.num_heads = 3;
  EXPECT_EQ(KVRowIndex(plain, 5, 2), 5 * 3 + 2);
}

}  // namespace
}  // namespace pagoda
