// IncrementalDetokenizer: the concatenation of what Add/Flush return equals
// Decode of all ids, and no piece it returns ends inside a UTF-8 character; seeded with a
// prompt, it equals Decode(prompt + output) minus Decode(prompt) for every fixture tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

using testing::TestStrings;
using testing::TokFixture;

void ExpectStreamsLikeDecode(const Tokenizer& tok, bool with_bos) {
  EncodeOptions options;
  options.add_special_tokens = with_bos;
  int split_chars = 0;
  for (const std::string& s : TestStrings()) {
    std::vector<int32_t> ids = tok.Encode(s, options);
    IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = detok.Add(id);
      EXPECT_EQ(CompleteUtf8Prefix(piece), piece.size()) << "half a character from \"" << s << "\"";
      if (!piece.empty()) {
        size_t len = 0;
        DecodeUtf8(piece, 0, &len);
        // A piece never starts with a continuation byte (its lead went out whole).
        EXPECT_NE(static_cast<uint8_t>(piece[0]) & 0xC0, 0x80) << s;
      }
      streamed += piece;
    }
    streamed += detok.Flush();
    EXPECT_EQ(streamed, tok.Decode(ids)) << s;
    split_chars += ids.size() > s.size() / 4;
  }
  EXPECT_GT(split_chars, 0);
}

TEST(IncrementalDetokenizerTest, SentencePieceWithByteFallback) {
  GgufFile gguf(TokFixture("tokenizers/gguf-vocab/ggml-vocab-llama-spm.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  ExpectStreamsLikeDecode(*tok, true);
  ExpectStreamsLikeDecode(*tok, false);
}

TEST(IncrementalDetokenizerTest, ByteLevelBpe) {
  auto tok = LoadHfTokenizer(TokFixture("tokenizers/gpt2-2k"));
  ExpectStreamsLikeDecode(*tok, false);
}

TEST(IncrementalDetokenizerTest, Llama2cAfterBos) {
  auto tok = LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 512);
  ExpectStreamsLikeDecode(*tok, true);
}

TEST(IncrementalDetokenizerTest, HoldsBackIncompleteCharacterUntilFlush) {
  GgufFile gguf(TokFixture("tokenizers/gguf-vocab/ggml-vocab-llama-spm.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  // "🦙" is four byte-fallback tokens <0xF0><0x9F><0xA6><0x99> in Llama 2.
  EncodeOptions options;
  options.add_special_tokens = false;
  std::vector<int32_t> ids = tok->Encode("a🦙", options);
  ASSERT_GE(ids.size(), 5u);
  IncrementalDetokenizer detok(*tok);
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) out += detok.Add(ids[i]);
  EXPECT_EQ(out, "a");  // the first three bytes of the llama are held back
  out += detok.Add(ids.back());
  EXPECT_EQ(out, "a🦙");
  // A dangling lead byte comes out on Flush, as it is.
  IncrementalDetokenizer cut(*tok);
  std::string partial = cut.Add(ids[0]);
  partial += cut.Add(ids[ids.size() - 4]);
  EXPECT_EQ(partial, "a");
  EXPECT_EQ(cut.Flush(), "\xF0");
}

// Every tokenizer in the fixtures: the tokenizer fixtures and the models' own.
struct NamedTokenizer {
  std::string name;
  std::function<std::unique_ptr<Tokenizer>()> load;
};

std::vector<NamedTokenizer> AllFixtureTokenizers() {
  auto gguf = [](const std::string& rel) {
    return [rel] {
      GgufFile g(TokFixture(rel));
      return LoadGgufTokenizer(g);
    };
  };
  std::vector<NamedTokenizer> all = {
      {"llama2_spm_model",
       [] { return LoadTokenizerForModel("x", TokFixture("tokenizers/llama2-spm/tokenizer.model"), 0); }},
      {"json_gpt2", [] { return LoadHfTokenizer(TokFixture("tokenizers/gpt2-bpe")); }},
      {"json_gpt2_2k", [] { return LoadHfTokenizer(TokFixture("tokenizers/gpt2-2k")); }},
      {"stories260k_tok512",
       [] { return LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 512); }},
      {"aidreams260k_tok512",
       [] { return LoadLlama2cTokenizer(TokFixture("models/aidreams260K/tok512.bin"), 512); }},
      {"stories260k_gguf", gguf("models/stories260K/stories260K.gguf")},
  };
  for (const char* v : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon", "starcoder"}) {
    all.push_back({std::string("gguf_") + v,
                   gguf(std::string("tokenizers/gguf-vocab/ggml-vocab-") + v + ".gguf")});
  }
  for (const char* m : {"deepseek-v2-mla", "deepseek-v3-moe", "llama-gqa", "llama-mha", "llama-mqa",
                        "mistral-swa", "qwen2-bias"}) {
    const std::string dir = std::string("models/hf/") + m;
    all.push_back({std::string("hf_") + m, [dir] { return LoadHfTokenizer(TokFixture(dir)); }});
  }
  return all;
}

// Generated text appended to the prompt's text is the text of the whole sequence: the
// completion of "Once upon a time there was" is " a little girl", not "a little girl".
TEST(IncrementalDetokenizerTest, ContinuesPromptForEveryFixtureTokenizer) {
  const std::vector<std::string> strings = TestStrings();
  for (const NamedTokenizer& t : AllFixtureTokenizers()) {
    std::unique_ptr<Tokenizer> tok = t.load();
    ASSERT_NE(tok, nullptr) << t.name;
    int64_t checked = 0, spaced = 0;
    for (const std::string& s : strings) {
      EncodeOptions options;  // BOS per the model's rule, as a server prompt
      const std::vector<int32_t> ids = tok->Encode(s, options);
      // Every split point: the prompt is ids[0, k), the generated ids the rest.
      for (size_t k = 1; k < ids.size(); ++k) {
        const std::span<const int32_t> all(ids);
        IncrementalDetokenizer detok(*tok, all.first(k));
        std::string completion;
        for (size_t i = k; i < ids.size(); ++i) completion += detok.Add(ids[i]);
        completion += detok.Flush();
        const std::string prompt_text = tok->Decode(all.first(k));
        ASSERT_EQ(prompt_text + completion, tok->Decode(all))
            << t.name << ": \"" << s << "\" split at " << k;
        ++checked;
        spaced += !completion.empty() && completion[0] == ' ';
      }
    }
    EXPECT_GT(checked, 100) << t.name;
    EXPECT_GT(spaced, 10) << t.name << ": no completion started with a space";
  }
}

// stories260K as the server loads it (a llama2.c tok512.bin, or its GGUF): the completion
// of "Once upon a time there was" keeps its leading space. Without the prompt as context,
// SentencePiece's rule drops the first space of the GGUF vocabulary's decode.
TEST(IncrementalDetokenizerTest, Stories260kKeepsTheFirstGeneratedSpace) {
  GgufFile gguf(TokFixture("models/stories260K/stories260K.gguf"));
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 512));
  toks.push_back(LoadGgufTokenizer(gguf));
  for (size_t t = 0; t < toks.size(); ++t) {
    const Tokenizer& tok = *toks[t];
    const std::vector<int32_t> prompt = tok.Encode("Once upon a time there was", EncodeOptions{});
    const std::vector<int32_t> whole = tok.Encode("Once upon a time there was a little girl", EncodeOptions{});
    ASSERT_GT(whole.size(), prompt.size());
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), whole.begin()));
    IncrementalDetokenizer with_prompt(tok, prompt);
    IncrementalDetokenizer without(tok);
    std::string a, b;
    for (size_t i = prompt.size(); i < whole.size(); ++i) {
      a += with_prompt.Add(whole[i]);
      b += without.Add(whole[i]);
    }
    a += with_prompt.Flush();
    b += without.Flush();
    EXPECT_EQ(a, " a little girl") << t;
    if (t == 1) EXPECT_EQ(b, "a little girl");  // the bug this fixes
  }
}

}  // namespace
}  // namespace pagoda
