// Malformed tokenizer files (truncated, wrong types, oversized lengths, bad ids)
// raise pagoda::Error naming the file, never crash. Run under ASan/UBSan in CI.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using testing::ReadAll;
using testing::TokFixture;
using testing::WriteTemp;

// Runs `load` and expects a pagoda::Error whose message contains `needle`.
template <typename F>
void ExpectError(F&& load, const std::string& needle) {
  try {
    load();
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Loading must either succeed or throw pagoda::Error; then encoding must not crash.
template <typename F>
void ExpectNoCrash(F&& load) {
  try {
    std::unique_ptr<Tokenizer> tok = load();
    if (tok != nullptr) {
      std::vector<int32_t> ids = tok->Encode("Hello world, ça va? 🦙", EncodeOptions());
      tok->Decode(ids);
    }
  } catch (const Error&) {
  }
}

// ---- llama2.c tok*.bin ----

std::string Int32(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string Float(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

TEST(MalformedInputTest, Llama2cTruncatedAnywhere) {
  std::string good = ReadAll(TokFixture("models/stories260K/tok512.bin"));
  for (size_t cut :
       {size_t{0}, size_t{2}, size_t{4}, size_t{9}, good.size() / 2, good.size() - 1}) {
    std::string path = WriteTemp("tok_cut.bin", good.substr(0, cut));
    ExpectError([&] { LoadLlama2cTokenizer(path, 512); }, path);
  }
}

TEST(MalformedInputTest, Llama2cOversizedAndNegativeLengths) {
  for (int32_t len : {-1, 1 << 30, 100}) {
    std::string bytes = Int32(16) + Float(0.0f) + Int32(len) + "abc";
    std::string path = WriteTemp("tok_len.bin", bytes);
    ExpectError([&] { LoadLlama2cTokenizer(path, 3); }, "claims");
  }
}

TEST(MalformedInputTest, Llama2cImplausibleHeaderAndTooFewTokens) {
  std::string path = WriteTemp("tok_hdr.bin", Int32(-5) + Float(0) + Int32(1) + "a");
  ExpectError([&] { LoadLlama2cTokenizer(path, 1); }, "max_token_length");
  path = WriteTemp("tok_few.bin", Int32(4) + Float(0) + Int32(1) + "a");
  ExpectError([&] { LoadLlama2cTokenizer(path, 1); }, "only 1 tokens");
  ExpectError([&] { LoadLlama2cTokenizer("/nonexistent/tok.bin", 512); }, "/nonexistent/tok.bin");
}

// ---- sentencepiece tokenizer.model ----

TEST(MalformedInputTest, SentencePieceTruncatedAnywhere) {
  std::string good = ReadAll(TokFixture("tokenizers/llama2-spm/tokenizer.model"));
  for (size_t cut : {size_t{0}, size_t{1}, size_t{3}, size_t{100}, good.size() / 3, good.size() / 2,
                     good.size() - 300, good.size() - 1}) {
    std::string path = WriteTemp("spm_cut.model", good.substr(0, cut));
    ExpectError([&] { LoadSentencePieceModel(path, nullptr); }, path);
  }
}

TEST(MalformedInputTest, SentencePieceWrongWireTypeAndOversizedLength) {
  // Field 1 (pieces) as a varint instead of a message.
  std::string path = WriteTemp("spm_wire.model", std::string("\x08\x01", 2));
  ExpectError([&] { LoadSentencePieceModel(path, nullptr); }, "not a length-delimited");
  // Field 1 claiming 2^28 bytes.
  path = WriteTemp("spm_len.model", std::string("\x0A\x80\x80\x80\x80\x01", 6));
  ExpectError([&] { LoadSentencePieceModel(path, nullptr); }, "claims");
  // An unterminated varint.
  path = WriteTemp("spm_varint.model", std::string("\x0A\xFF\xFF", 3));
  ExpectError([&] { LoadSentencePieceModel(path, nullptr); }, "truncated varint");
  // A group (wire type 3).
  path = WriteTemp("spm_group.model", std::string("\x0B", 1));
  ExpectError([&] { LoadSentencePieceModel(path, nullptr); }, "wire type 3");
}

TEST(MalformedInputTest, SentencePieceBitFlipsNeverCrash) {
  std::string good = ReadAll(TokFixture("tokenizers/llama2-spm/tokenizer.model"));
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    std::string bad = good;
    for (int i = 0; i < 8; ++i) bad[rng() % bad.size()] ^= static_cast<char>(1 << (rng() % 8));
    std::string path = WriteTemp("spm_flip.model", bad);
    ExpectNoCrash([&] { return LoadSentencePieceModel(path, nullptr); });
  }
}

// ---- tokenizer.json ----

std::string LoadJsonError(const std::string& name, const std::string& text) {
  std::string path = WriteTemp(name, text);
  try {
    LoadTokenizerJson(path, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MalformedInputTest, TokenizerJsonBadDocuments) {
  const std::string ok_model =
      R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  struct Case {
    const char* name;
    std::string text;
    const char* needle;
  };
  std::vector<Case> cases = {
      {"not_json", "{\"model\": ", "not valid JSON"},
      {"array_root", "[1, 2]", "expected a JSON object"},
      {"no_model", "{}", "$.model: missing"},
      {"vocab_array", R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})",
       "$.model.vocab"},
      {"vocab_string_id", R"({"model": {"type": "BPE", "vocab": {"a": "0"}, "merges": []}})",
       "expected an integer"},
      {"vocab_huge_id", R"({"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}})",
       "id out of range"},
      {"merge_number", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [5]}})",
       "merges[0]"},
      {"merge_no_space", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})",
       "merges[0]"},
      {"wordpiece", R"({"model": {"type": "WordPiece", "vocab": {}}})", "WordPiece"},
      {"added_bad_id", "{" + ok_model + R"(, "added_tokens": [{"id": -3, "content": "x"}]})",
       "added_tokens.0.id"},
      {"added_no_content", "{" + ok_model + R"(, "added_tokens": [{"id": 3}]})", "content"},
      {"pre_unknown", "{" + ok_model + R"(, "pre_tokenizer": {"type": "Magic"}})", "Magic"},
      {"pre_bad_regex",
       "{" + ok_model + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}}})",
       "does not compile"},
      {"pre_bad_pattern", "{" + ok_model + R"(, "pre_tokenizer": {"type": "Split", "pattern": 7}})",
       "pattern"},
      {"bool_as_string",
       "{" + ok_model + R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": "yes"}})",
       "add_prefix_space"},
      {"post_missing_special",
       "{" + ok_model +
           R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {}}})",
       "<s>"},
      {"post_id_out_of_range",
       "{" + ok_model +
           R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {"<s>": {"ids": [77]}}}})",
       "77 is outside"},
  };
  for (const Case& c : cases) {
    std::string message = LoadJsonError(std::string("bad_") + c.name + ".json", c.text);
    EXPECT_NE(message.find(c.needle), std::string::npos) << c.name << ": \"" << message << "\"";
    EXPECT_NE(message.find(c.name), std::string::npos)
        << c.name << ": no file name in \"" << message << "\"";
  }
}

TEST(MalformedInputTest, TokenizerJsonTruncatedAnywhere) {
  std::string good = ReadAll(TokFixture("tokenizers/gpt2-2k/tokenizer.json"));
  for (size_t cut : {size_t{0}, size_t{1}, size_t{50}, good.size() / 2, good.size() - 2}) {
    std::string path = WriteTemp("cut_tokenizer.json", good.substr(0, cut));
    ExpectError([&] { LoadTokenizerJson(path, nullptr); }, path);
  }
}

TEST(MalformedInputTest, TokenizerConfigWrongTypes) {
  std::string dir =
      std::filesystem::path(
          WriteTemp("hf/tokenizer.json", ReadAll(TokFixture("tokenizers/gpt2-2k/tokenizer.json"))))
          .parent_path()
          .string();
  WriteTemp("hf/tokenizer_config.json", R"({"add_bos_token": "true"})");
  ExpectError([&] { LoadHfTokenizer(dir); }, "add_bos_token");
  WriteTemp("hf/tokenizer_config.json", R"({"bos_token": 3})");
  ExpectError([&] { LoadHfTokenizer(dir); }, "bos_token");
  WriteTemp("hf/tokenizer_config.json", "{not json");
  ExpectError([&] { LoadHfTokenizer(dir); }, "not valid JSON");
  std::filesystem::remove(dir + "/tokenizer_config.json");
  std::filesystem::remove(dir + "/tokenizer.json");
  ExpectError([&] { LoadHfTokenizer(dir); }, "no tokenizer.json or tokenizer.model");
}

}  // namespace
}  // namespace pagoda
