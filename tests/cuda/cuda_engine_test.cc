// The continuous-batching engine on the GPU (qwen2-bias: bf16 weights on tensor cores, GQA
// attention on tensor cores, bf16 KV, decode steps replayed from CUDA graphs, greedy tokens
// chosen on the device): a request's greedy tokens do not depend on the batch (64 at once =
// alone), on prefix-cache hits, on chunked prefill or block size, or on preemption under a tiny
// cache; the same with fp8 and int8 KV. And stories260K (f32) batched and forked.
#include <gtest/gtest.h>

#include <map>

#include "backend/cuda_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "kv/kv_cache_config.h"
#include "model/model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = testing::Gpu();
    ASSERT_NE(gpu_, nullptr) << "no CUDA device (see above)";
    LoadOptions options;
    options.backend = gpu_;
    model_ = LoadModel(testing::Fixture("models/hf/qwen2-bias"), options);
    gpu_->EnableStepGraphs(true);
  }
  void TearDown() override {
    if (gpu_ != nullptr) gpu_->EnableStepGraphs(false);
  }

  EngineConfig Config(int64_t num_blocks, int64_t block_size = 16, bool prefix_caching = true,
                      int64_t budget = 4096) {
    return testing::SmallEngineConfig(num_blocks, block_size, prefix_caching, budget, KVCacheDType::kBF16);
  }

  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return testing::GreedyAlone(*model_, prompt, max_tokens, DType::kBF16, 256);
  }

  std::map<int64_t, std::vector<int32_t>> RunAll(Engine& e, const std::vector<RequestSpec>& specs) {
    return testing::RunEngine(e, specs);
  }

  std::vector<RequestSpec> Specs(int n, int64_t prompt_len, int64_t max_tokens, bool shared_prefix) {
    const int32_t vocab = static_cast<int32_t>(model_->spec().vocab_size);
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      RequestSpec s;
      for (int64_t j = 0; j < prompt_len + (i % 5); ++j) {
        s.prompt.push_back(shared_prefix && j < prompt_len - 5 ? static_cast<int32_t>(100 + j % 300)
                                                               : static_cast<int32_t>(3 + (i * 37 + j * 11) % (vocab - 3)));
      }
      s.sampling.temperature = 0;
      s.max_tokens = max_tokens;
      s.ignore_eos = true;
      specs.push_back(s);
    }
    return specs;
  }

  CudaBackend* gpu_ = nullptr;
  std::unique_ptr<Model> model_;
};

// --cuda-graph-sizes: every (size, split depth) graph captured at start-up, decode steps padded
// to the sizes (rows on a spare block), each request's tokens those it gets alone. Sizes past 64
// rows capture and replay the CUTLASS GEMMs (kernels/cuda/gemm_cutlass.cu) inside the graphs.
TEST_F(CudaEngineTest, PaddedDecodeGraphsCapturedAtStartUpKeepTheAloneOutputs) {
  EngineConfig config = Config(1024);
  config.scheduler.max_num_seqs = 96;
  config.decode_batch_sizes = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96};
  Engine e(*model_, nullptr, config);
  const int64_t warmed = gpu_->num_step_graphs();
  EXPECT_GE(warmed, 13) << "a graph per size at least, before any request";
  auto specs = Specs(80, 40, 24, false);
  for (size_t i = 0; i < specs.size(); ++i) specs[i].max_tokens = 4 + static_cast<int64_t>(i % 20);
  const auto out = RunAll(e, specs);
  ASSERT_EQ(out.size(), specs.size());
  EXPECT_EQ(gpu_->num_step_graphs(), warmed) << "decode steps replayed the start-up graphs, captured none";
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, specs[i].max_tokens)) << "request " << id;
    ++i;
  }
}

TEST_F(CudaEngineTest, SixtyFourConcurrentRequestsGetTheirAloneOutputs) {
  Engine e(*model_, nullptr, Config(1024));
  const auto specs = Specs(64, 40, 24, false);
  const auto out = RunAll(e, specs);
  ASSERT_EQ(out.size(), specs.size());
  EXPECT_GT(gpu_->num_step_graphs(), 0) << "the decode steps should have run as graphs";
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, 24)) << "request " << id;
    ++i;
  }
}

TEST_F(CudaEngineTest, PrefixCacheHitsDoNotChangeOutputs) {
  const auto specs = Specs(8, 100, 20, /*shared_prefix=*/true);
  Engine on(*model_, nullptr, Config(256, 16, true));
  RunAll(on, {specs[0]});  // warms the cache
  const auto a = RunAll(on, specs);
  Engine off(*model_, nullptr, Config(256, 16, false));
  const auto b = RunAll(off, specs);
  ASSERT_EQ(a.size(), b.size());
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) EXPECT_EQ(ia->second, ib->second);
  EXPECT_GT(on.Stats().prefix_cache.num_hit_tokens, 0);
}

TEST_F(CudaEngineTest, ChunkedPrefillAndBlockSizeDoNotChangeOutputs) {
  const auto specs = Specs(4, 120, 10, false);
  Engine big(*model_, nullptr, Config(256, 16, true, 4096));
  const auto a = RunAll(big, specs);
  Engine chunked(*model_, nullptr, Config(4096, 1, true, 37));
  const auto b = RunAll(chunked, specs);
  ASSERT_EQ(a.size(), b.size());
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) EXPECT_EQ(ia->second, ib->second);
}

TEST_F(CudaEngineTest, PreemptionUnderATinyCacheLosesNothing) {
  Engine e(*model_, nullptr, Config(20, 16, true));  // 320 tokens for 10 requests of ~120
  const auto specs = Specs(10, 60, 60, false);
  const auto out = RunAll(e, specs);
  EXPECT_GT(e.Stats().num_preemptions, 0);
  int i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, Alone(specs[i].prompt, 60)) << "request " << id;
    ++i;
  }
}

// fp8, int8, int4 and nvfp4 KV, quantized on the device and read by FlashAttention (converted in the
// kernel): 16 concurrent requests (decode graphs, mixed prefill/decode steps) give the tokens
// each gets alone.
TEST_F(CudaEngineTest, QuantizedKVRequestsGetTheirAloneOutputs) {
  for (const KVCacheDType dtype : {KVCacheDType::kFp8E4M3, KVCacheDType::kInt8, KVCacheDType::kInt4, KVCacheDType::kNvfp4}) {
    SCOPED_TRACE(KVCacheDTypeName(dtype));
    const EngineConfig c = testing::SmallEngineConfig(512, 16, false, 4096, dtype);
    const auto specs = Specs(16, 40, 24, false);
    Engine e(*model_, nullptr, c);
    const auto out = RunAll(e, specs);
    ASSERT_EQ(out.size(), specs.size());
    auto it = out.begin();
    for (size_t i = 0; i < specs.size(); ++i, ++it) {
      Engine alone(*model_, nullptr, c);
      const auto one = RunAll(alone, {specs[i]});
      ASSERT_EQ(one.size(), 1u);
      EXPECT_EQ(it->second, one.begin()->second) << "request " << it->first;
    }
  }
}

// The side pool (kivi2's residual; int4 with sink and recent tokens): 16 requests of 150-170
// prompt tokens (two key splits) through one engine, in one prefill step (blocks walking their
// splits) and then in prefill chunks of at most 48 tokens with a prefix-cache hit (a block per
// split and a merge kernel), give the tokens each gets alone; decode steps run as graphs.
TEST_F(CudaEngineTest, SidePoolRequestsGetTheirAloneOutputs) {
  struct Policy {
    KVCacheDType dtype;
    int64_t sink, recent;
  };
  for (const Policy& policy : {Policy{KVCacheDType::kKivi2, 0, 0}, Policy{KVCacheDType::kInt4, 4, 8}}) {
    SCOPED_TRACE(std::string(KVCacheDTypeName(policy.dtype)) + " sink " + std::to_string(policy.sink) + " recent " +
                 std::to_string(policy.recent));
    auto config = [&](bool prefix_caching, int64_t budget) {
      EngineConfig c = testing::SmallEngineConfig(1024, 16, prefix_caching, budget, policy.dtype);
      c.kv_quant.sink_tokens = policy.sink;
      c.kv_quant.recent_tokens = policy.recent;
      return c;
    };
    const auto specs = Specs(16, 150, 12, true);
    std::vector<std::vector<int32_t>> alone;
    for (const RequestSpec& s : specs) {
      Engine one(*model_, nullptr, config(false, 4096));
      alone.push_back(RunAll(one, {s}).begin()->second);
    }
    for (const auto& [prefix_caching, budget] : {std::pair{false, int64_t{4096}}, std::pair{true, int64_t{48}}}) {
      SCOPED_TRACE(std::string("budget ") + std::to_string(budget));
      Engine e(*model_, nullptr, config(prefix_caching, budget));
      const auto out = RunAll(e, specs);
      ASSERT_EQ(out.size(), specs.size());
      size_t i = 0;
      for (const auto& [id, tokens] : out) EXPECT_EQ(tokens, alone[i++]) << "request " << id;
      if (prefix_caching) {
        EXPECT_GT(e.Stats().prefix_cache.num_hit_tokens, 0);
      }
    }
  }
}

// stories260K (f32 weights and KV, head dim 8: the f32 GEMM and the plain attention kernel,
// which the tests above never batch): 16 concurrent requests and a greedy n = 2 request (its
// second sample forked onto the prompt's blocks, copy-on-write) give the tokens each gets alone.
TEST(CudaEngineF32Test, ConcurrentAndForkedRequestsGetTheirAloneOutputs) {
  CudaBackend* gpu = testing::Gpu();
  ASSERT_NE(gpu, nullptr) << "no CUDA device (see above)";
  LoadOptions options;
  options.backend = gpu;
  auto model = LoadModel(testing::Fixture("models/stories260K/stories260K.bin"), options);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 16; ++i) {
    RequestSpec s;
    s.prompt = {1};
    for (int j = 0; j < 3 + i % 7; ++j) s.prompt.push_back(static_cast<int32_t>(3 + (i * 37 + j * 11) % 500));
    s.sampling.temperature = 0;
    s.max_tokens = 24;
    s.ignore_eos = true;
    specs.push_back(s);
  }
  RequestSpec forked = specs[0];
  forked.n = 2;
  specs.push_back(forked);
  gpu->EnableStepGraphs(true);
  Engine e(*model, nullptr, testing::SmallEngineConfig(512, 16, true, 4096, KVCacheDType::kF32));
  const auto out = testing::RunEngine(e, specs);
  gpu->EnableStepGraphs(false);
  ASSERT_EQ(out.size(), specs.size() + 1);  // the n = 2 request's two samples
  auto it = out.begin();
  for (size_t i = 0; i < specs.size(); ++i, ++it) {
    const auto want = testing::GreedyAlone(*model, specs[i].prompt, 24, DType::kF32, 256);
    EXPECT_EQ(it->second, want) << "request " << it->first;
    if (specs[i].n == 2) {
      ++it;
      EXPECT_EQ(it->second, want) << "the forked sample " << it->first;
    }
  }
}

}  // namespace
}  // namespace pagoda
