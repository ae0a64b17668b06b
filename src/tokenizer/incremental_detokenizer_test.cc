// IncrementalDetokenizer: the concatenation of what Add/Flush return equals
// Decode of all ids, and no piece it returns ends inside a UTF-8 character.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pagoda
