// Whole models on the CUDA backend through LoadModel: the Hugging Face fixtures against their
// transformers float64 goldens (logits of every position, the last position's full logits
// and greedy decoding, as tests/golden_hf_test.cc and golden_deepseek_test.cc check them on
// the CPU), and stories260K (f32) greedy from BOS: the CPU's tokens and the 256 published ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda_backend.h"
#include "engine/generator.h"
#include "io/safetensors_file.h"
#include "model/model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

struct GoldenCase {
  std::string dir;  // under models/hf/
  double logit_tol;
};

class CudaGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

// Tolerance (absolute, on logits): 1e-3, the CPU's (golden_hf_test.cc): the CUDA path is f32
// throughout (weights widened from bf16 exactly, FP32 GEMMs without TF32, f32 KV cache here),
// so its only error against the float64 golden is f32 rounding, as on the CPU.
TEST_P(CudaGoldenTest, MatchesTransformersFloat64) {
  const GoldenCase& c = GetParam();
  CudaBackend* gpu = testing::Gpu();
  ASSERT_NE(gpu, nullptr);
  LoadOptions options;
  options.backend = gpu;
  auto model = LoadModel(testing::Fixture("models/hf/" + c.dir), options);
  SafetensorsFile golden(testing::Fixture("models/hf/" + c.dir + "/golden.safetensors"));
  for (const std::string s : {"a", "b"}) {
    SCOPED_TRACE("sequence " + s);
    const auto e = testing::CheckSequence(*model, golden, s, c.logit_tol, /*check_greedy=*/true);
    std::printf("[measured] cuda %s seq %s: top8 logits %.3g, last logits %.3g\n", c.dir.c_str(), s.c_str(), e.topk,
                e.last);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenTest,
                         ::testing::Values(GoldenCase{"llama-mqa", 1e-3}, GoldenCase{"qwen2-bias", 1e-3},
                                           GoldenCase{"mistral-swa", 1e-3}, GoldenCase{"llama-mha", 1e-3},
                                           GoldenCase{"llama-gqa", 1e-3}, GoldenCase{"deepseek-v2-mla", 1e-3},
                                           GoldenCase{"deepseek-v3-moe", 1e-3}),
                         [](const auto& info) {
                           std::string name = info.param.dir;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

std::vector<int32_t> GreedyFromBos(Model& model) {
  GeneratorOptions options;
  options.kv_dtype = DType::kF32;
  options.max_model_len = 257;
  Generator gen(model, options);
  GenerateRequest req;
  req.prompt = {1};
  req.sampling.temperature = 0.0;
  req.max_tokens = 100000;
  req.eos_ids = {1};  // the reference stops on BOS
  return gen.Generate(req).output;
}

TEST(CudaStories260KTest, GreedyTokensEqualTheCpusAndThePublishedOutput) {
  CudaBackend* gpu = testing::Gpu();
  ASSERT_NE(gpu, nullptr);
  const std::string path = testing::Fixture("models/stories260K/stories260K.bin");
  LoadOptions options;
  options.backend = gpu;
  auto on_gpu = LoadModel(path, options);
  auto on_cpu = LoadModel(path);
  const auto gpu_tokens = GreedyFromBos(*on_gpu);
  const auto cpu_tokens = GreedyFromBos(*on_cpu);
  EXPECT_EQ(gpu_tokens, cpu_tokens);
  std::ifstream in(testing::Fixture("models/stories260K/expected_greedy.json"));
  const auto expected = nlohmann::json::parse(in).at("token_ids").get<std::vector<int32_t>>();
  ASSERT_EQ(gpu_tokens.size(), 256u);
  for (size_t i = 0; i < gpu_tokens.size(); ++i) ASSERT_EQ(gpu_tokens[i], expected[i + 1]) << "token " << i;
  std::printf("[measured] cuda stories260K: %zu greedy tokens equal the CPU's and the published ones\n",
              gpu_tokens.size());
}

}  // namespace
}  // namespace pagoda
