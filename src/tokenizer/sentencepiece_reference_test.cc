// tokenizer.model against the reference, Debian's libsentencepiece, on strings.json
// and on every line of the corpora (encode ids and decode text).
//
// Built only when the test target links sentencepiece and defines
// PAGODA_WITH_SENTENCEPIECE (see docs/tokenizers.md); the sentencepiece golden
// file (golden_test.cc) covers strings.json without it.
#ifdef PAGODA_WITH_SENTENCEPIECE

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::ReadAll;
using testing::TestStrings;
using testing::TokFixture;

class SentencePieceReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TokFixture("tokenizers/llama2-spm/tokenizer.model");
    ASSERT_TRUE(reference_.Load(path_).ok());
    ours_ = LoadSentencePieceModel(path_, nullptr);
  }

  void Compare(const std::string& text) {
    std::vector<int> expected;
    ASSERT_TRUE(reference_.Encode(text, &expected).ok());
    EncodeOptions options;
    options.add_special_tokens = false;
    std::vector<int32_t> ids = ours_->Encode(text, options);
    ASSERT_EQ(std::vector<int>(ids.begin(), ids.end()), expected) << "\"" << text << "\"";
    std::string decoded;
    ASSERT_TRUE(reference_.Decode(expected, &decoded).ok());
    EXPECT_EQ(ours_->Decode(ids), decoded) << "\"" << text << "\"";
    ++compared_;
  }

  std::string path_;
  sentencepiece::SentencePieceProcessor reference_;
  std::unique_ptr<Tokenizer> ours_;
  int compared_ = 0;
};

TEST_F(SentencePieceReferenceTest, StringsJson) {
  for (const std::string& s : TestStrings()) Compare(s);
  EXPECT_EQ(compared_, 57);
}

TEST_F(SentencePieceReferenceTest, EveryCorpusLine) {
  for (const char* corpus : {"corpora/tinyshakespeare.txt", "corpora/tinystories-first2MiB.txt"}) {
    std::istringstream lines(ReadAll(TokFixture(corpus)));
    std::string line;
    while (std::getline(lines, line)) {
      Compare(line);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(compared_, 50000);
}

}  // namespace
}  // namespace pagoda

#endif  // PAGODA_WITH_SENTENCEPIECE
