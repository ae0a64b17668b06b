// What the CUDA op tests share (cuda_ops_test, cuda_attention_test, cuda_kv_cache_test,
// cuda_sampling_test): weights made from f32 values, ragged steps over scrambled block tables,
// and the fixture holding the CPU backend (the reference) and the GPU with a device arena.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "backend/step_description.h"
#include "core/dtype.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagoda {

using testing::DeviceArena;
using testing::Gpu;
using testing::kF32Tolerance;
using testing::RandomVector;
using testing::RelativeError;

// A weight matrix in `dtype` made from f32 values (kept alive by `bytes`).
inline WeightMatrix MakeWeight(DType dtype, int64_t rows, int64_t cols, const std::vector<float>& values,
                        std::vector<uint8_t>* bytes) {
  WeightMatrix w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = DTypeRowBytes(dtype, cols);
  bytes->resize(static_cast<size_t>(rows * w.row_bytes));
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(dtype, values.data() + r * cols, bytes->data() + r * w.row_bytes, cols);
  w.data = bytes->data();
  return w;
}

// A cache of `layers` layers x `blocks` blocks of `block_size` tokens, `kv_heads` heads of
// `head_dim` values in `dtype` (plain; the tests set quant, group_size, head_dim_v on top).
inline KVStorageShape CacheShape(int64_t layers, int64_t blocks, int64_t block_size, int64_t kv_heads,
                                 int64_t head_dim, DType dtype) {
  KVStorageShape shape;
  shape.num_layers = layers;
  shape.num_blocks = blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.dtype = dtype;
  return shape;
}

// A step of sequences given as (tokens already cached, new tokens), with scrambled block ids.
struct StepCase {
  StepBuilder builder;
  std::vector<std::vector<int32_t>> tables;
  int64_t num_blocks = 0;
};

// Block tables for sequences of the given total lengths, block ids shuffled over the pool.
inline void MakeTables(const std::vector<int64_t>& lengths, int64_t block_size, uint32_t seed, StepCase* c,
                       bool runs = false) {
  int64_t total = 0;
  for (int64_t n : lengths) total += (n + block_size - 1) / block_size;
  c->num_blocks = total + 3;  // a few blocks nobody uses
  std::vector<int32_t> ids(c->num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (runs) {
    // Mostly consecutive blocks, as a fresh pool hands out a prompt's: every ninth pair swapped,
    // so runs of every length and alignment meet blocks out of order.
    for (size_t i = 4; i + 1 < ids.size(); i += 9) std::swap(ids[i], ids[i + 1]);
  } else {
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  }
  int64_t next = 0;
  c->tables.clear();
  for (int64_t n : lengths) {
    std::vector<int32_t> t;
    for (int64_t b = 0; b < (n + block_size - 1) / block_size; ++b) t.push_back(ids[next++]);
    c->tables.push_back(t);
  }
}

// One step: sequence s gets tokens [first[s], first[s] + count[s]) of a dummy token list.
inline const StepDescription& BuildStep(StepCase* c, int64_t block_size, const std::vector<int64_t>& first,
                                 const std::vector<int64_t>& count, int32_t vocab) {
  c->builder.Reset(block_size);
  for (size_t s = 0; s < first.size(); ++s) {
    std::vector<int32_t> tokens(first[s] + count[s]);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + s * 31) % vocab);
    const int64_t index = c->builder.AddSequence(tokens, first[s], count[s], c->tables[s]);
    c->builder.AddLogits(index + count[s] - 1);
  }
  return c->builder.Finish();
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = Gpu();
    ASSERT_NE(gpu_, nullptr) << "no CUDA device (see above)";  // fatal: the body does not run
    arena_ = std::make_unique<DeviceArena>(*gpu_);
  }
  Backend& cpu_ = DefaultCpuBackend();
  CudaBackend* gpu_ = nullptr;
  std::unique_ptr<DeviceArena> arena_;
};


}  // namespace pagoda
