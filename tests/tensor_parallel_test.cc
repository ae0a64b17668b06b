// Tensor parallelism on CPU backends: the HF fixtures sharded over 2 (and 4 where the heads
// allow) ranks, one thread and one CpuBackend per rank joined by a LocalGroup. Every rank
// computes the same logits bit for bit; they match the float64 goldens as the whole model does,
// and greedy decoding gives the unsharded model's tokens. Then TensorParallelModel, the
// engine's view of a sharded model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/step_description.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "io/safetensors_file.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_layout.h"
#include "model/model.h"
#include "model/tensor_parallel_model.h"
#include "parallel/communicator.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

// One model sharded over `size` ranks, each with its backend, communicator and KV cache.
class ShardedModel {
 public:
  ShardedModel(const Model& full, int size, int64_t num_blocks) : group_(size) {
    for (int r = 0; r < size; ++r) {
      backends_.push_back(std::make_unique<CpuBackend>());
      backends_[r]->SetCommunicator(&group_.rank(r));
      shards_.push_back(full.Shard(r, size, *backends_[r]));
      caches_.push_back(backends_[r]->CreateKVCache(shards_[r]->KVShapeFor(num_blocks, 16, DType::kF32)));
    }
  }
  int size() const { return static_cast<int>(shards_.size()); }
  const Model& shard(int r) const { return *shards_[r]; }

  // Tokens [first, first + count) of `tokens` on every rank at once; each rank's logits rows.
  std::vector<std::vector<float>> Forward(const std::vector<int32_t>& tokens, int64_t first, int64_t count,
                                          LogitRows rows) {
    const int64_t vocab = shards_[0]->spec().vocab_size;
    std::vector<std::vector<float>> logits(size(), std::vector<float>((rows == LogitRows::kAll ? count : 1) * vocab));
    std::vector<int32_t> table(caches_[0]->shape().num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(size());
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          StepBuilder builder;
          ForwardSequence(*shards_[r], *caches_[r], builder, tokens, first, count, table, rows, logits[r].data());
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    return logits;
  }

 private:
  LocalGroup group_;
  std::vector<std::unique_ptr<CpuBackend>> backends_;
  std::vector<std::unique_ptr<Model>> shards_;
  std::vector<std::unique_ptr<KVCache>> caches_;
};

struct TpCase {
  std::string dir;
  int size;
};

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelTest, RanksAgreeAndMatchTheGoldensAndTheWholeModelsGreedyTokens) {
  const TpCase& c = GetParam();
  auto full = LoadModel(testing::Fixture("models/hf/" + c.dir));
  SafetensorsFile golden(testing::Fixture("models/hf/" + c.dir + "/golden.safetensors"));
  const int64_t vocab = full->spec().vocab_size;
  for (const std::string s : {"a", "b"}) {
    SCOPED_TRACE("sequence " + s);
    const auto ids = testing::GoldenIds(golden, s);
    const int64_t steps = 12;
    ShardedModel tp(*full, c.size, (static_cast<int64_t>(ids.size()) + steps) / 16 + 2);
    EXPECT_EQ(tp.shard(0).spec().num_heads * c.size, full->spec().num_heads);
    // The prompt: every position's logits, the same bits on every rank, within the goldens'
    // tolerance (the CPU's: f32 throughout; only the row-parallel sums' order changes).
    const auto logits = tp.Forward(ids, 0, static_cast<int64_t>(ids.size()), LogitRows::kAll);
    for (int r = 1; r < c.size; ++r) {
      ASSERT_EQ(std::memcmp(logits[r].data(), logits[0].data(), logits[0].size() * sizeof(float)), 0)
          << "rank " << r << " computed other logits than rank 0";
    }
    testing::CheckGoldenLogits(logits[0], vocab, golden, s, 1e-3);
    // Greedy decoding: the sharded model's tokens equal the whole model's (the goldens' margins
    // are large enough for f32 at these steps; CheckGoldenGreedy guards the whole model).
    auto cache = full->backend().CreateKVCache(full->KVShapeFor((static_cast<int64_t>(ids.size()) + steps) / 16 + 2, 16,
                                                                DType::kF32));
    const auto want = testing::GreedyWithCache(*full, *cache, ids, steps);
    std::vector<int32_t> seq = ids, got;
    auto last = std::vector<float>(logits[0].end() - vocab, logits[0].end());
    for (int64_t i = 0; i < steps; ++i) {
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      got.push_back(next);
      seq.push_back(next);
      if (i + 1 < steps) last = tp.Forward(seq, static_cast<int64_t>(seq.size()) - 1, 1, LogitRows::kLast)[0];
    }
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest,
                         ::testing::Values(TpCase{"llama-gqa", 2}, TpCase{"qwen2-bias", 2}, TpCase{"mistral-swa", 2},
                                           TpCase{"llama-mha", 2}, TpCase{"llama-mha", 4}, TpCase{"llama-gqa", 4},
                                           TpCase{"llama-mqa", 2}, TpCase{"llama-mqa", 4}, TpCase{"deepseek-v2-mla", 2},
                                           TpCase{"deepseek-v2-mla", 4}, TpCase{"deepseek-v3-moe", 2}),
                         [](const auto& info) {
                           std::string name = info.param.dir + "_tp" + std::to_string(info.param.size);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(TensorParallelRefusalTest, SizesThatDoNotDivideTheHeadsAreRefused) {
  auto gqa = LoadModel(testing::Fixture("models/hf/llama-gqa"));  // 4 heads, 2 KV heads
  CpuBackend backend;
  try {
    gqa->Shard(0, 3, backend);
    ADD_FAILURE() << "3 ranks for 2 KV heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the 2 key/value heads"), std::string::npos) << e.what();
  }
  try {
    gqa->Shard(0, 8, backend);
    ADD_FAILURE() << "8 ranks for 4 attention heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the 4 attention heads"), std::string::npos) << e.what();
  }
  auto moe = LoadModel(testing::Fixture("models/hf/deepseek-v3-moe"));  // 4 heads, experts 64 wide
  try {
    moe->Shard(0, 3, backend);
    ADD_FAILURE() << "3 ranks for 4 heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the 4 attention heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// The engine-facing wrapper: stories260K (f32, 8 query / 4 KV heads) over 2 CPU ranks gives
// the 256 published greedy tokens, and 8 concurrent requests through the engine get the tokens
// each gets alone on the same sharded model.
// The KV cache of a sharded model stores what Model::KVCopies says: the heads once when they
// divide among the ranks, each head on every rank of its group when there are fewer heads than
// ranks, and MLA's latent on every rank.
TEST(TensorParallelModelTest, KVCopiesCountWhatTheRanksCachesHold) {
  struct Case {
    std::string dir;
    int size;
    int64_t copies;
  };
  for (const Case& c : {Case{"llama-gqa", 2, 1}, Case{"llama-mqa", 4, 4}, Case{"llama-gqa", 4, 2},
                        Case{"deepseek-v2-mla", 2, 2}}) {
    SCOPED_TRACE(c.dir + " over " + std::to_string(c.size));
    auto tp = TensorParallelModel::OnCpu(LoadModel(testing::Fixture("models/hf/" + c.dir)), c.size);
    EXPECT_EQ(tp->KVCopies(), c.copies);
    auto cache = tp->backend().CreateKVCache(tp->KVShapeFor(8, 16, DType::kF32));
    EXPECT_EQ(cache->bytes(), KVBytesPerToken(tp->spec().kv_shape(), KVCacheDType::kF32, {}) * c.copies * 8 * 16);
  }
}

TEST(TensorParallelModelTest, Stories260KOverTwoRanksGivesThePublishedTokensAndEngineInvariance) {
  auto tp = TensorParallelModel::OnCpu(LoadModel(testing::Fixture("models/stories260K/stories260K.bin")), 2);
  ASSERT_EQ(tp->size(), 2);
  EXPECT_EQ(tp->shard(1).spec().num_kv_heads * 2, tp->spec().num_kv_heads);
  GeneratorOptions options;
  options.kv_dtype = DType::kF32;
  options.max_model_len = 257;
  {
    Generator gen(*tp, options);
    GenerateRequest req;
    req.prompt = {1};
    req.sampling.temperature = 0.0;
    req.max_tokens = 100000;
    req.eos_ids = {1};
    const auto out = gen.Generate(req).output;
    std::ifstream in(testing::Fixture("models/stories260K/expected_greedy.json"));
    const auto expected = nlohmann::json::parse(in).at("token_ids").get<std::vector<int32_t>>();
    ASSERT_EQ(out.size(), 256u);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], expected[i + 1]) << "token " << i;
  }
  EngineConfig c;
  c.kv.num_blocks = 128;
  c.kv.block_size = 16;
  c.kv.dtype = KVCacheDType::kF32;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_batched_tokens = 512;
  c.scheduler.max_num_seqs = 16;
  Engine engine(*tp, nullptr, c);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 8; ++i) {
    RequestSpec s;
    for (int j = 0; j < 20 + i; ++j) s.prompt.push_back(static_cast<int32_t>(1 + (i * 37 + j * 11) % 500));
    s.sampling.temperature = 0;
    s.max_tokens = 16;
    s.ignore_eos = true;
    specs.push_back(s);
  }
  const auto out = testing::RunEngine(engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  size_t i = 0;
  for (const auto& [id, ids] : out) {
    EXPECT_EQ(ids, testing::GreedyAlone(*tp, specs[i].prompt, 16, DType::kF32, 257)) << "request " << id;
    ++i;
  }
}

}  // namespace
}  // namespace pagoda
