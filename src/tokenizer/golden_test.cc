// The golden ids in fixtures/tokenizers/*/golden.json (sentencepiece for
// llama2-spm, HF tokenizers for gpt2-bpe and gpt2-2k) on strings.json, no BOS.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::ReadJson;
using testing::TestStrings;
using testing::TokFixture;

void ExpectGolden(const Tokenizer& tok, const std::string& golden_path, bool parse_special) {
  std::vector<std::string> strings = TestStrings();
  auto golden = ReadJson(golden_path)["ids"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(golden.size(), strings.size());
  EncodeOptions options;
  options.add_special_tokens = false;
  options.parse_special = parse_special;
  int matched = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    std::vector<int32_t> ids = tok.Encode(strings[i], options);
    EXPECT_EQ(ids, golden[i]) << "string " << i << ": \"" << strings[i] << "\"";
    matched += ids == golden[i];
  }
  EXPECT_EQ(matched, static_cast<int>(strings.size()));
}

TEST(GoldenTest, Llama2SentencePieceModelMatchesSentencepiece) {
  auto tok = LoadTokenizerForModel(TokFixture("tokenizers/llama2-spm"),
                                   TokFixture("tokenizers/llama2-spm/tokenizer.model"), 0);
  ExpectGolden(*tok, TokFixture("tokenizers/llama2-spm/golden.json"), false);
}

TEST(GoldenTest, Llama2GgufVocabMatchesSentencepiece) {
  auto tok =
      LoadTokenizerForModel(TokFixture("tokenizers/gguf-vocab/ggml-vocab-llama-spm.gguf"), "", 0);
  ExpectGolden(*tok, TokFixture("tokenizers/llama2-spm/golden.json"), false);
}

TEST(GoldenTest, Gpt2TokenizerJsonMatchesHfTokenizers) {
  auto tok = LoadHfTokenizer(TokFixture("tokenizers/gpt2-bpe"));
  ExpectGolden(*tok, TokFixture("tokenizers/gpt2-bpe/golden.json"), true);
}

TEST(GoldenTest, Gpt2TruncatedTokenizerJsonMatchesHfTokenizers) {
  auto tok = LoadHfTokenizer(TokFixture("tokenizers/gpt2-2k"));
  ExpectGolden(*tok, TokFixture("tokenizers/gpt2-2k/golden.json"), true);
}

}  // namespace
}  // namespace pagoda
