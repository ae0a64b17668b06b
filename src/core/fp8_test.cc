// FP8 and FP4 conversions. FP8 is checked bit for bit against the CUDA toolkit's host
// conversions (cuda_fp8.h), through the table tests/tools/fp8_reference_table.cc wrote:
// all 256 codes decoded, every bf16 bit pattern encoded (a dense sweep of the float line:
// zeros, subnormals, every binade, inf, NaN), and the midpoints between neighbouring codes
// with the floats just beside them (ties and their neighbours), both signs.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/fp4.h"

namespace pagoda {
namespace {

struct Table {
  std::vector<float> decode;   // 256
  std::vector<uint8_t> sweep;  // 65536: encode(bf16 pattern << 16)
  std::vector<uint8_t> edges;  // encode(EdgeInputs(decode))
};

Table ReadTable(const std::string& name) {
  const std::string path = std::string(PAGODA_SOURCE_DIR) + "/tests/data/" + name;
  FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  Table t;
  if (f == nullptr) return t;
  t.decode.resize(256);
  t.sweep.resize(65536);
  EXPECT_EQ(std::fread(t.decode.data(), 4, 256, f), 256u);
  EXPECT_EQ(std::fread(t.sweep.data(), 1, 65536, f), 65536u);
  uint8_t b;
  while (std::fread(&b, 1, 1, f) == 1) t.edges.push_back(b);
  std::fclose(f);
  return t;
}

// Must match EdgeInputs() in tests/tools/fp8_reference_table.cc.
std::vector<float> EdgeInputs(const std::vector<float>& decode) {
  std::vector<float> finite;
  for (int c = 0; c < 128; ++c) {
    if (std::isfinite(decode[c])) finite.push_back(decode[c]);
  }
  std::vector<float> out;
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float mid = (finite[i] + finite[i + 1]) * 0.5f;
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  const float top = finite.back();
  for (float x :
       {top * 1.0625f, top * 1.125f, top * 2.0f, 1e30f, INFINITY, NAN, 1e-30f, 1e-45f, 0.0f}) {
    out.push_back(x);
    out.push_back(-x);
  }
  return out;
}

void CheckFormat(const std::string& file, uint8_t (*encode)(float), float (*decode)(uint8_t)) {
  const Table t = ReadTable(file);
  ASSERT_EQ(t.decode.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float ours = decode(static_cast<uint8_t>(c)), cuda = t.decode[c];
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(ours)) << "code " << c;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(cuda)) << "code " << c;
    }
  }
  int64_t mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = std::bit_cast<float>(b << 16);
    if (encode(x) != t.sweep[b] && ++mismatches < 10) {
      ADD_FAILURE() << file << ": encode(" << x << " = bf16 0x" << std::hex << b << ") = 0x"
                    << int(encode(x)) << ", cuda 0x" << int(t.sweep[b]);
    }
  }
  const std::vector<float> edges = EdgeInputs(t.decode);
  ASSERT_EQ(edges.size(), t.edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    if (encode(edges[i]) != t.edges[i] && ++mismatches < 20) {
      ADD_FAILURE() << file << ": encode(" << edges[i] << ") = " << int(encode(edges[i]))
                    << ", cuda " << int(t.edges[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Fp8Test, E4M3MatchesCudaToolkitExhaustively) {
  CheckFormat("fp8_e4m3.bin", F32ToFp8E4M3, Fp8E4M3ToF32);
}

TEST(Fp8Test, E5M2MatchesCudaToolkitExhaustively) {
  CheckFormat("fp8_e5m2.bin", F32ToFp8E5M2, Fp8E5M2ToF32);
}

TEST(Fp8Test, E4M3SaturatesNeverNaNByOverflow) {
  EXPECT_EQ(Fp8E4M3ToF32(F32ToFp8E4M3(1e6f)), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(F32ToFp8E4M3(-INFINITY)), -448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(F32ToFp8E4M3(449.0f)), 448.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(F32ToFp8E4M3(NAN))));
}

TEST(Fp4Test, RoundsToNearestEvenAndSaturates) {
  // Every E2M1 value round-trips; ties go to the even mantissa; beyond 6 saturates.
  for (uint8_t c = 0; c < 16; ++c) {
    const float v = Fp4E2M1ToF32(c);
    EXPECT_EQ(Fp4E2M1ToF32(F32ToFp4E2M1(v)), v) << int(c);
  }
  const float ties[][2] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                           {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f},  {100.0f, 6.0f}};
  for (const auto& t : ties) {
    EXPECT_EQ(Fp4E2M1ToF32(F32ToFp4E2M1(t[0])), t[1]) << t[0];
    EXPECT_EQ(Fp4E2M1ToF32(F32ToFp4E2M1(-t[0])), -t[1]) << t[0];
  }
  // Dense sweep against the nearest value (ties excluded above).
  for (float x = 0.0f; x < 8.0f; x += 0.013f) {
    float best = 0.0f;
    for (uint8_t c = 0; c < 8; ++c) {
      if (std::fabs(Fp4E2M1ToF32(c) - x) < std::fabs(best - x)) best = Fp4E2M1ToF32(c);
    }
    EXPECT_EQ(Fp4E2M1ToF32(F32ToFp4E2M1(x)), best) << x;
  }
}

}  // namespace
}  // namespace pagoda
