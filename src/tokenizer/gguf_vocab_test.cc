// llama.cpp's tokenizer test vectors: every fixtures/tokenizers/gguf-vocab/*.gguf
// against its .inp (strings separated by "\n__ggml_vocab_test__\n") and .out (one
// line of space-separated ids per string, no BOS) files.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::ReadAll;
using testing::TokFixture;

std::vector<std::string> SplitInputs(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos = text.find(sep); pos != std::string::npos; pos = text.find(sep, start)) {
    out.push_back(text.substr(start, pos - start));
    start = pos + sep.size();
  }
  return out;  // the file ends with a separator
}

std::vector<std::vector<int32_t>> ReadOutputs(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    int64_t id;
    while (ids >> id) row.push_back(static_cast<int32_t>(id));
    out.push_back(std::move(row));
  }
  return out;
}

class GgufVocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabTest, MatchesLlamaCppVectors) {
  std::string path =
      TokFixture(std::string("tokenizers/gguf-vocab/ggml-vocab-") + GetParam() + ".gguf");
  GgufFile gguf(path);
  std::unique_ptr<Tokenizer> tok = LoadGgufTokenizer(gguf);
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> inputs = SplitInputs(ReadAll(
      TokFixture(std::string("tokenizers/gguf-vocab/ggml-vocab-") + GetParam() + ".gguf.inp")));
  std::vector<std::vector<int32_t>> expected = ReadOutputs(ReadAll(
      TokFixture(std::string("tokenizers/gguf-vocab/ggml-vocab-") + GetParam() + ".gguf.out")));
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 40u);
  EncodeOptions options;
  options.add_special_tokens = false;
  int matched = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> ids = tok->Encode(inputs[i], options);
    EXPECT_EQ(ids, expected[i]) << GetParam() << " vector " << i << ": \"" << inputs[i] << "\"";
    matched += ids == expected[i];
  }
  EXPECT_EQ(matched, static_cast<int>(inputs.size())) << GetParam();
}

TEST(GgufVocabTest, EveryVocabFileHasATest) {
  const std::set<std::string> tested = {"llama-spm",    "phi-3",  "gpt-2",
                                        "deepseek-llm", "falcon", "starcoder"};
  for (const auto& entry :
       std::filesystem::directory_iterator(TokFixture("tokenizers/gguf-vocab"))) {
    std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".gguf") continue;
    std::string stem = name.substr(std::string("ggml-vocab-").size());
    stem = stem.substr(0, stem.size() - 5);
    EXPECT_TRUE(tested.count(stem)) << name << " has no test";
  }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, GgufVocabTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon",
                                           "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace pagoda
