// Plan, then run: the CPU backend makes the attention plan of a step once and every layer
// reuses it (a new plan per step, not per layer), and its results are those of planning in
// every layer (the seam's bit-identity test covers the models; this covers the count).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backend/cpu_backend.h"
#include "model/model.h"

namespace pagoda {
namespace {

TEST(BackendPlanTest, OneAttentionPlanPerStepForEveryLayer) {
  CpuBackend backend;
  LoadOptions o;
  o.backend = &backend;
  std::unique_ptr<Model> model = LoadModel("dummy:llama-tiny", o);
  ASSERT_EQ(model->spec().num_layers, 4);
  const int64_t bs = 16, n = 40;
  std::unique_ptr<KVCache> cache = backend.CreateKVCache(model->KVShapeFor(4, bs, DType::kBF16));
  std::vector<int32_t> table{3, 0, 2, 1}, tokens(n);
  std::iota(tokens.begin(), tokens.end(), 5);
  std::vector<float> logits(model->spec().vocab_size);
  StepBuilder builder;
  const int64_t before = backend.num_plans();
  ForwardSequence(*model, *cache, builder, tokens, 0, n - 1, table, LogitRows::kLast, logits.data());
  EXPECT_EQ(backend.num_plans(), before + 1) << "prefill: one plan for 4 layers";
  ForwardSequence(*model, *cache, builder, tokens, n - 1, 1, table, LogitRows::kLast, logits.data());
  EXPECT_EQ(backend.num_plans(), before + 2) << "decode: one more";
}

TEST(BackendPlanTest, AModelRunsOnlyOnTheBackendThatPreparedIt) {
  CpuBackend mine, other;
  LoadOptions o;
  o.backend = &mine;
  std::unique_ptr<Model> model = LoadModel("dummy:llama-tiny", o);
  EXPECT_EQ(&model->backend(), &mine);
  std::unique_ptr<KVCache> cache = other.CreateKVCache(model->KVShapeFor(1, 16, DType::kBF16));
  StepBuilder builder;
  builder.Reset(16);
  const std::vector<int32_t> tokens{1, 2}, table{0};
  builder.AddSequence(tokens, 0, 2, table);
  EXPECT_DEATH(model->Forward(builder.Finish(), other, *cache, TensorView{}), "other than the one");
}

}  // namespace
}  // namespace pagoda
