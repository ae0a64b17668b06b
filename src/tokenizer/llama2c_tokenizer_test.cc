// llama2.c's tok512.bin encodes like the same vocabulary stored in
// stories260K.gguf (llama.cpp's SPM path), and decodes like run.c (the leading
// space of the piece after BOS is dropped; <0xXX> pieces become bytes).
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::TestStrings;
using testing::TokFixture;

TEST(Llama2cTokenizerTest, EncodesLikeTheGgufOfTheSameModel) {
  auto bin = LoadTokenizerForModel(TokFixture("models/stories260K/stories260K.bin"),
                                   TokFixture("models/stories260K/tok512.bin"), 0);
  GgufFile gguf(TokFixture("models/stories260K/stories260K.gguf"));
  auto ref = LoadGgufTokenizer(gguf);
  ASSERT_EQ(bin->vocab_size(), 512);
  ASSERT_EQ(ref->vocab_size(), 512);
  // llama2.c's export stores BOS/EOS as "\n<s>\n" and "\n</s>\n"; the rest agree.
  for (int32_t id = 3; id < 512; ++id) ASSERT_EQ(bin->TokenPiece(id), ref->TokenPiece(id)) << id;
  for (const std::string& s : TestStrings()) {
    EXPECT_EQ(bin->Encode(s, EncodeOptions()), ref->Encode(s, EncodeOptions())) << s;
  }
  EXPECT_EQ(bin->bos_id(), 1);
  EXPECT_EQ(bin->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(bin->add_bos());
}

TEST(Llama2cTokenizerTest, DecodesLikeRunC) {
  auto tok = LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 512);
  std::vector<int32_t> ids = tok->Encode("Once upon a time\n", EncodeOptions());
  ASSERT_EQ(ids.front(), 1);
  EXPECT_EQ(tok->Decode(ids), "Once upon a time\n");
  // Without BOS in front, run.c keeps the leading space.
  EXPECT_EQ(tok->Decode(std::span<const int32_t>(ids).subspan(1)), " Once upon a time\n");
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/false), "\n<s>\nOnce upon a time\n");
}

TEST(Llama2cTokenizerTest, ReadsToTheEndWithoutAVocabSize) {
  auto tok = LoadLlama2cTokenizer(TokFixture("models/stories260K/tok512.bin"), 0);
  EXPECT_EQ(tok->vocab_size(), 512);
}

TEST(TokenizerFactoryTest, PicksTheLoaderFromThePath) {
  EXPECT_EQ(LoadTokenizerForModel("dummy:llama-tiny", "", 32000), nullptr);
  auto hf = LoadTokenizerForModel(TokFixture("models/hf/llama-gqa"), "", 0);
  EXPECT_EQ(hf->vocab_size(), 32000);
  EXPECT_TRUE(hf->add_bos());
  EXPECT_EQ(hf->bos_id(), 1);
  auto qwen = LoadTokenizerForModel(TokFixture("models/hf/qwen2-bias"), "", 0);
  EXPECT_EQ(qwen->vocab_size(), 2048);
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(qwen->bos_id(), 2047);
  EXPECT_EQ(qwen->eos_ids(), std::vector<int32_t>{2047});
  auto gguf = LoadTokenizerForModel(TokFixture("models/hf/qwen2-bias/qwen2-bias.q8_0.gguf"), "", 0);
  EncodeOptions options;
  options.add_special_tokens = false;
  for (const std::string& s : TestStrings()) {
    EXPECT_EQ(gguf->Encode(s, options), qwen->Encode(s, options)) << s;
  }
  try {
    LoadTokenizerForModel(TokFixture("models/stories260K/stories260K.bin"), "", 0);
    ADD_FAILURE() << "a llama2.c model without --tokenizer must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda
