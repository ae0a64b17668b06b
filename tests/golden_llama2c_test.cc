// Real trained models (stories260K, aidreams260K): greedy generation from BOS equals the
// published / independently computed outputs token for token.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

std::vector<int32_t> ExpectedIds(const std::string& path) {
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  return j.at("token_ids").get<std::vector<int32_t>>();
}

// Greedy from BOS; the expected list starts with BOS.
void CheckGreedy(const std::string& model_path, const std::string& expected_path, int64_t max_model_len,
                 int64_t num_expected) {
  auto model = LoadModel(model_path);
  const auto expected = ExpectedIds(expected_path);
  ASSERT_GE(static_cast<int64_t>(expected.size()), num_expected + 1);
  GeneratorOptions options;
  options.kv_dtype = DType::kF32;
  options.max_model_len = max_model_len;
  Generator gen(*model, options);
  GenerateRequest req;
  req.prompt = {1};
  req.sampling.temperature = 0.0;
  req.max_tokens = 100000;
  req.eos_ids = {1};  // the references stop on BOS
  const auto out = gen.Generate(req).output;
  ASSERT_EQ(static_cast<int64_t>(out.size()), num_expected);
  for (int64_t i = 0; i < num_expected; ++i) ASSERT_EQ(out[i], expected[i + 1]) << "token " << i;
}

TEST(Stories260KTest, GgufGreedyFromBosMatchesPublishedOutput) {
  CheckGreedy(testing::Fixture("models/stories260K/stories260K.gguf"),
              testing::Fixture("models/stories260K/expected_greedy.json"), 257, 256);
}

TEST(Stories260KTest, Llama2cGreedyFromBosMatchesPublishedOutput) {
  CheckGreedy(testing::Fixture("models/stories260K/stories260K.bin"),
              testing::Fixture("models/stories260K/expected_greedy.json"), 257, 256);
}

TEST(AiDreams260KTest, GreedyWithinItsContextMatchesReference) {
  // Context 128: the default max_model_len leaves room for 127 generated tokens.
  CheckGreedy(testing::Fixture("models/aidreams260K/aidreams260K.bin"),
              testing::Fixture("models/aidreams260K/expected_greedy.json"), 0, 127);
}

TEST(Stories260KTest, GgufAndLlama2cGiveTheSameLogits) {
  auto a = LoadModel(testing::Fixture("models/stories260K/stories260K.gguf"));
  auto b = LoadModel(testing::Fixture("models/stories260K/stories260K.bin"));
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 383, 286};
  const auto la = testing::AllLogits(*a, ids);
  const auto lb = testing::AllLogits(*b, ids);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-4) << i;
}

}  // namespace
}  // namespace pagoda
