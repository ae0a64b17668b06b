// K-quant dequantization (Q4_K, Q5_K, Q6_K) against the gguf Python package.
//
// tests/data/kquants.gguf is made by tests/tools/make_kquant_gguf.py: each quantized
// tensor `t` comes with `t.expected`, gguf.quants.dequantize of the same bytes in F32.
// ggml, the gguf package and pagoda do the same float operations in the same order, so the
// comparison is bit-exact.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf_file.h"

namespace pagoda {
namespace {

std::string DataFile() { return std::string(PAGODA_SOURCE_DIR) + "/tests/data/kquants.gguf"; }

class KQuantTest : public ::testing::TestWithParam<DType> {};

TEST_P(KQuantTest, DequantizeRowMatchesGgufPackageBitExactly) {
  const DType type = GetParam();
  GgufFile f(DataFile());
  const std::string name(DTypeName(type));
  const GgufTensor& q = f.GetTensor(name);
  const GgufTensor& expected = f.GetTensor(name + ".expected");
  ASSERT_EQ(q.dtype, type);
  ASSERT_EQ(expected.dtype, DType::kF32);
  ASSERT_EQ(q.num_elements, expected.num_elements);
  const int64_t cols = q.shape[0], rows = q.num_elements / cols;
  ASSERT_EQ(cols % 256, 0);
  ASSERT_EQ(q.num_bytes, rows * DTypeRowBytes(type, cols));

  std::vector<float> want(q.num_elements), got(q.num_elements);
  std::memcpy(want.data(), expected.data, want.size() * sizeof(float));
  // Row by row, as the model reads weights (one row = several super-blocks).
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(type, q.data + r * DTypeRowBytes(type, cols), got.data() + r * cols, cols);
  }
  int64_t mismatches = 0;
  for (int64_t i = 0; i < q.num_elements; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && ++mismatches <= 5) {
      ADD_FAILURE() << name << " value " << i << " (row " << i / cols << ", super-block "
                    << (i % cols) / 256 << ", index " << i % 256 << "): pagoda " << got[i]
                    << ", gguf " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << name;

  // The whole tensor in one call gives the same values (rows are whole super-blocks).
  std::vector<float> all(q.num_elements);
  DequantizeRow(type, q.data, all.data(), q.num_elements);
  EXPECT_EQ(std::memcmp(all.data(), got.data(), all.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantTest,
                         ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(KQuantTest, BlockGeometryMatchesGgml) {
  EXPECT_EQ(DTypeBlockSize(DType::kQ4_K), 256);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_K), 144);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_K), 176);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ6_K), 210);
}

}  // namespace
}  // namespace pagoda
