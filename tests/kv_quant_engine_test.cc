// Quantized KV caches in the continuous-batching engine (stories260K): for every format and
// mixed-precision policy, a request's greedy tokens do not depend on prefix-cache hits, on
// the rest of the batch, on chunked prefill, or on preemption, the same properties
// engine_test.cc checks for f32 caches. (Block size is part of a quantized format: kivi2's
// key groups and the recent window are per block, so it is held fixed here.)
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "kv/kv_cache_config.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

struct Policy {
  KVCacheDType dtype;
  int64_t sink = 0, recent = 0, heavy = 0;
};

class KVQuantEngineTest : public ::testing::TestWithParam<Policy> {
 protected:
  void SetUp() override {
    model_ = LoadModel(testing::Fixture("models/stories260K/stories260K.bin"));
  }

  EngineConfig Config(int64_t num_blocks, bool prefix_caching, int64_t budget) const {
    EngineConfig c;
    c.kv.num_blocks = num_blocks;
    c.kv.block_size = 16;
    c.kv.dtype = GetParam().dtype;
    c.kv_quant.sink_tokens = GetParam().sink;
    c.kv_quant.recent_tokens = GetParam().recent;
    c.kv_quant.heavy_tokens = GetParam().heavy;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = budget;
    c.scheduler.max_num_seqs = 64;
    c.enable_prefix_caching = prefix_caching;
    return c;
  }

  std::vector<RequestSpec> Specs(int n, int64_t prompt_len, int64_t max_tokens) const {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      RequestSpec s;
      s.prompt.push_back(1);
      for (int64_t j = 1; j < prompt_len + (i % 3); ++j) {
        s.prompt.push_back(
            static_cast<int32_t>(j < prompt_len - 5 ? 260 + j % 200 : 3 + (i * 37 + j * 11) % 500));
      }
      s.sampling.temperature = 0;
      s.max_tokens = max_tokens;
      s.ignore_eos = true;
      specs.push_back(s);
    }
    return specs;
  }

  std::vector<std::vector<int32_t>> RunAll(Engine& e, const std::vector<RequestSpec>& specs) {
    std::vector<std::vector<int32_t>> result;
    for (auto& [id, v] : testing::RunEngine(e, specs)) result.push_back(v);
    return result;
  }

  std::unique_ptr<Model> model_;
};

TEST_P(KVQuantEngineTest, OutputsDoNotDependOnPrefixHitsBatchChunksOrPreemption) {
  const auto specs = Specs(6, 70, 24);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& s : specs) {
    Engine one(*model_, nullptr, Config(64, false, 4096));
    alone.push_back(RunAll(one, {s})[0]);
  }
  Engine cached(*model_, nullptr, Config(256, true, 4096));
  RunAll(cached, {specs[0]});  // warm the prefix cache
  EXPECT_EQ(RunAll(cached, specs), alone) << "batched, with prefix-cache hits";
  EXPECT_GT(cached.Stats().prefix_cache.num_hit_tokens, 0);
  Engine chunked(*model_, nullptr, Config(256, true, 23));
  EXPECT_EQ(RunAll(chunked, specs), alone) << "chunked prefill";
  Engine tiny(*model_, nullptr, Config(14, true, 4096));
  EXPECT_EQ(RunAll(tiny, specs), alone) << "under preemption";
  EXPECT_GT(tiny.Stats().num_preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, KVQuantEngineTest,
    ::testing::Values(Policy{KVCacheDType::kFp8E4M3}, Policy{KVCacheDType::kInt8},
                      Policy{KVCacheDType::kInt4}, Policy{KVCacheDType::kNvfp4},
                      Policy{KVCacheDType::kKivi2}, Policy{KVCacheDType::kInt4, 4, 0},
                      Policy{KVCacheDType::kFp8E4M3, 0, 8}, Policy{KVCacheDType::kKivi2, 4, 8},
                      Policy{KVCacheDType::kInt4, 0, 0, 2}, Policy{KVCacheDType::kKivi2, 0, 0, 2}),
    [](const auto& info) {
      const Policy& p = info.param;
      return std::string(KVCacheDTypeName(p.dtype)) + "_sink" + std::to_string(p.sink) + "_recent" +
             std::to_string(p.recent) + "_heavy" + std::to_string(p.heavy);
    });

}  // namespace
}  // namespace pagoda
