// Malformed GGUF vocabularies (missing keys, wrong types, mismatched lengths, ids
// out of range, truncated files) raise pagoda::Error naming the file and key.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::ReadAll;
using testing::TokFixture;
using testing::WriteTemp;

// A minimal GGUF v3 writer: metadata only, no tensors.
class GgufBuilder {
 public:
  GgufBuilder& Str(const std::string& key, const std::string& v) {
    Key(key, 8);
    String(v);
    return *this;
  }
  GgufBuilder& I32(const std::string& key, int32_t v) {
    Key(key, 5);
    Pod(v);
    return *this;
  }
  GgufBuilder& Bool(const std::string& key, bool v) {
    Key(key, 7);
    Pod(static_cast<uint8_t>(v));
    return *this;
  }
  GgufBuilder& Strs(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Pod(uint32_t{8});
    Pod(static_cast<uint64_t>(v.size()));
    for (const std::string& s : v) String(s);
    return *this;
  }
  GgufBuilder& F32s(const std::string& key, const std::vector<float>& v) {
    Key(key, 9);
    Pod(uint32_t{6});
    Pod(static_cast<uint64_t>(v.size()));
    for (float f : v) Pod(f);
    return *this;
  }
  GgufBuilder& I32s(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, 9);
    Pod(uint32_t{5});
    Pod(static_cast<uint64_t>(v.size()));
    for (int32_t i : v) Pod(i);
    return *this;
  }
  std::string Write(const std::string& name) const {
    std::string out = "GGUF";
    auto pod = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    pod(uint32_t{3});
    pod(uint64_t{0});
    pod(static_cast<uint64_t>(num_kv_));
    out += body_;
    return WriteTemp(name, out);
  }

 private:
  template <typename T>
  void Pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void String(const std::string& s) {
    Pod(static_cast<uint64_t>(s.size()));
    body_ += s;
  }
  void Key(const std::string& key, uint32_t type) {
    String(key);
    Pod(type);
    ++num_kv_;
  }
  std::string body_;
  size_t num_kv_ = 0;
};

const std::vector<std::string> kTokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"};

GgufBuilder SpmBase() {
  GgufBuilder b;
  b.Str("tokenizer.ggml.model", "llama").Strs("tokenizer.ggml.tokens", kTokens);
  return b;
}

template <typename F>
void ExpectError(F&& load, const std::vector<std::string>& needles) {
  try {
    load();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
}

std::unique_ptr<Tokenizer> Load(const std::string& path) {
  GgufFile gguf(path);
  return LoadGgufTokenizer(gguf);
}

TEST(GgufVocabMalformedTest, ValidMinimalVocabLoads) {
  std::string path =
      SpmBase().F32s("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3}).Write("ok.gguf");
  auto tok = Load(path);
  EXPECT_EQ(tok->Encode("ab", EncodeOptions()), (std::vector<int32_t>{1, 3, 4, 5}));
}

TEST(GgufVocabMalformedTest, MissingOrWrongTypedKeys) {
  ExpectError(
      [] { Load(GgufBuilder().Strs("tokenizer.ggml.tokens", kTokens).Write("nomodel.gguf")); },
      {"nomodel.gguf", "tokenizer.ggml.model"});
  ExpectError(
      [] { Load(GgufBuilder().Str("tokenizer.ggml.model", "llama").Write("notokens.gguf")); },
      {"notokens.gguf", "tokenizer.ggml.tokens"});
  ExpectError([] { Load(SpmBase().Str("tokenizer.ggml.model", "bert").Write("bert.gguf")); },
              {"bert.gguf"});
  ExpectError(
      [] {
        Load(GgufBuilder()
                 .Str("tokenizer.ggml.model", "llama")
                 .I32s("tokenizer.ggml.tokens", {1, 2})
                 .Write("inttokens.gguf"));
      },
      {"inttokens.gguf", "tokenizer.ggml.tokens"});
  ExpectError([] { Load(SpmBase().Str("tokenizer.ggml.scores", "x").Write("strscores.gguf")); },
              {"strscores.gguf", "tokenizer.ggml.scores"});
  ExpectError(
      [] { Load(SpmBase().Strs("tokenizer.ggml.add_bos_token", {"x"}).Write("bos_type.gguf")); },
      {"bos_type.gguf", "add_bos_token"});
}

TEST(GgufVocabMalformedTest, LengthMismatchesAndBadIds) {
  ExpectError(
      [] {
        Load(SpmBase().F32s("tokenizer.ggml.scores", {0, 1}).Write("scores.gguf"));
      },
      {"scores.gguf", "tokenizer.ggml.scores has 2 entries for 6 tokens"});
  ExpectError([] { Load(SpmBase().I32s("tokenizer.ggml.token_type", {1}).Write("types.gguf")); },
              {"types.gguf", "token_type"});
  ExpectError([] { Load(SpmBase().I32("tokenizer.ggml.bos_token_id", 600).Write("bos.gguf")); },
              {"bos.gguf", "bos_token_id = 600"});
  ExpectError([] { Load(SpmBase().I32("tokenizer.ggml.eos_token_id", 6).Write("eos.gguf")); },
              {"eos.gguf", "eos_token_id"});
  ExpectError(
      [] {
        Load(GgufBuilder()
                 .Str("tokenizer.ggml.model", "llama")
                 .Strs("tokenizer.ggml.tokens", {})
                 .Write("empty.gguf"));
      },
      {"empty.gguf", "empty"});
}

TEST(GgufVocabMalformedTest, Gpt2MergesAndPreType) {
  auto base = [] {
    GgufBuilder b;
    b.Str("tokenizer.ggml.model", "gpt2").Strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
    return b;
  };
  ExpectError([&] { Load(base().Strs("tokenizer.ggml.merges", {"ab"}).Write("merge.gguf")); },
              {"merge.gguf", "tokenizer.ggml.merges[0]"});
  ExpectError([&] { Load(base().Write("nomerges.gguf")); },
              {"nomerges.gguf", "tokenizer.ggml.merges"});
  ExpectError(
      [&] {
        Load(base()
                 .Strs("tokenizer.ggml.merges", {"a b"})
                 .Str("tokenizer.ggml.pre", "klingon")
                 .Write("pre.gguf"));
      },
      {"pre.gguf", "klingon"});
  auto tok = Load(base()
                      .Strs("tokenizer.ggml.merges", {"a b"})
                      .Str("tokenizer.ggml.pre", "gpt-2")
                      .Write("ok2.gguf"));
  EXPECT_EQ(tok->Encode("ab", EncodeOptions()), (std::vector<int32_t>{2}));
}

TEST(GgufVocabMalformedTest, TruncatedVocabFiles) {
  std::string good = ReadAll(TokFixture("tokenizers/gguf-vocab/ggml-vocab-gpt-2.gguf"));
  for (size_t cut : {size_t{3}, size_t{30}, good.size() / 4, good.size() / 2, good.size() - 10}) {
    std::string path = WriteTemp("cut_vocab.gguf", good.substr(0, cut));
    ExpectError([&] { Load(path); }, {path});
  }
}

}  // namespace
}  // namespace pagoda
