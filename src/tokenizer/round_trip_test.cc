// decode(encode(s)) == s for every tokenizer on strings.json and on the whole
// corpora (fixtures/corpora; a 256 KiB slice of each under sanitizers), with the
// default EncodeOptions (BOS per the model's rule, special tokens in the text not
// parsed) and Decode dropping BOS.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

// Sanitizer builds run ~50x slower; they round-trip the first 256 KiB of each
// corpus (cut at a newline), other builds the whole files.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kCorpusBytes = size_t{256} << 10;
#else
constexpr size_t kCorpusBytes = SIZE_MAX;
#endif

using testing::ReadAll;
using testing::TestStrings;
using testing::TokFixture;

struct Source {
  const char* name;
  std::function<std::unique_ptr<Tokenizer>()> load;
};

std::unique_ptr<Tokenizer> FromGguf(const std::string& rel) {
  GgufFile gguf(TokFixture(rel));
  return LoadGgufTokenizer(gguf);
}

std::vector<Source> Sources() {
  return {
      {"llama2_spm_model",
       [] {
         return LoadTokenizerForModel("x", TokFixture("tokenizers/llama2-spm/tokenizer.model"), 0);
       }},
      {"hf_llama_gqa_dir", [] { return LoadHfTokenizer(TokFixture("models/hf/llama-gqa")); }},
      {"gguf_llama_spm",
       [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-llama-spm.gguf"); }},
      {"gguf_phi3", [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-phi-3.gguf"); }},
      {"gguf_gpt2", [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-gpt-2.gguf"); }},
      {"gguf_deepseek_llm",
       [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-deepseek-llm.gguf"); }},
      {"gguf_falcon", [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-falcon.gguf"); }},
      {"gguf_starcoder",
       [] { return FromGguf("tokenizers/gguf-vocab/ggml-vocab-starcoder.gguf"); }},
      {"json_gpt2", [] { return LoadHfTokenizer(TokFixture("tokenizers/gpt2-bpe")); }},
      {"json_gpt2_2k", [] { return LoadHfTokenizer(TokFixture("tokenizers/gpt2-2k")); }},
      {"llama2c_tok512",
       [] {
         return LoadTokenizerForModel(TokFixture("models/stories260K/stories260K.bin"),
                                      TokFixture("models/stories260K/tok512.bin"), 0);
       }},
      {"gguf_stories260k", [] { return FromGguf("models/stories260K/stories260K.gguf"); }},
  };
}

class RoundTripTest : public ::testing::TestWithParam<Source> {};

TEST_P(RoundTripTest, StringsJson) {
  std::unique_ptr<Tokenizer> tok = GetParam().load();
  ASSERT_NE(tok, nullptr);
  // llama2.c drops the leading space only right after BOS (run.c), so its round
  // trip needs BOS.
  bool llama2c = std::string(GetParam().name) == "llama2c_tok512";
  for (bool add_special : {false, true}) {
    if (llama2c && !add_special) continue;
    EncodeOptions options;
    options.add_special_tokens = add_special;
    for (const std::string& s : TestStrings()) {
      std::vector<int32_t> ids = tok->Encode(s, options);
      EXPECT_EQ(tok->Decode(ids), s) << GetParam().name << " add_special=" << add_special;
    }
  }
}

TEST_P(RoundTripTest, Corpora) {
  std::unique_ptr<Tokenizer> tok = GetParam().load();
  ASSERT_NE(tok, nullptr);
  for (const char* corpus : {"corpora/tinyshakespeare.txt", "corpora/tinystories-first2MiB.txt"}) {
    std::string text = ReadAll(TokFixture(corpus));
    if (text.size() > kCorpusBytes) text.resize(text.rfind('\n', kCorpusBytes) + 1);
    std::vector<int32_t> ids = tok->Encode(text, EncodeOptions());
    EXPECT_GT(ids.size(), text.size() / 8) << corpus;
    std::string back = tok->Decode(ids);
    ASSERT_EQ(back.size(), text.size()) << GetParam().name << " " << corpus;
    EXPECT_TRUE(back == text) << GetParam().name << " " << corpus;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, RoundTripTest, ::testing::ValuesIn(Sources()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pagoda
