// tokenizer.json pipelines beyond GPT-2's: a SentencePiece-style BPE (Llama 2's HF
// format: Prepend/Replace normalizers, byte_fallback, Metaspace-like decoders,
// TemplateProcessing with BOS) built from the Llama 2 tokenizer.model the way
// transformers' LlamaConverter does, which must tokenize exactly like the .model;
// and small hand-checked cases for Split behaviors and added tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"
#include "tokenizer/tokenizer_test_util.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing::TestStrings;
using testing::TokFixture;
using testing::WriteTemp;

// transformers' SentencePieceExtractor: every split of a piece into two pieces is a
// merge, ranked by the merged piece's score (highest first).
json LlamaTokenizerJson(const SpmVocab& v) {
  json vocab = json::object();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    vocab[v.pieces[i]] = i;
    ids[v.pieces[i]] = static_cast<int32_t>(i);
  }
  struct Merge {
    std::string l, r;
    float score;
    int32_t lid, rid;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.types[i] != TokenType::kNormal) continue;
    const std::string& p = v.pieces[i];
    std::vector<Merge> local;
    for (size_t cut = 1; cut < p.size(); ++cut) {
      if ((static_cast<uint8_t>(p[cut]) & 0xC0) == 0x80) continue;  // inside a character
      auto l = ids.find(p.substr(0, cut));
      auto r = ids.find(p.substr(cut));
      if (l != ids.end() && r != ids.end()) {
        local.push_back({l->first, r->first, v.scores[i], l->second, r->second});
      }
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return std::make_pair(a.lid, a.rid) < std::make_pair(b.lid, b.rid);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(json::array({m.l, m.r}));
  const std::string meta = "\xE2\x96\x81";
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", meta}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

TEST(HfTokenizerJsonTest, SentencePieceStyleJsonMatchesTheModel) {
  std::string model_path = TokFixture("tokenizers/llama2-spm/tokenizer.model");
  auto model = LoadSentencePieceModel(model_path, nullptr);
  const auto& spm = dynamic_cast<const SpmTokenizer&>(*model);
  std::string json_path =
      WriteTemp("llama_json/tokenizer.json", LlamaTokenizerJson(spm.vocab()).dump());
  auto tok = LoadTokenizerJson(json_path, nullptr);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 1);
  for (const std::string& s : TestStrings()) {
    std::vector<int32_t> ids = tok->Encode(s, EncodeOptions());
    EXPECT_EQ(ids, model->Encode(s, EncodeOptions())) << s;
    EXPECT_EQ(tok->Decode(ids), s) << s;
  }
}

std::unique_ptr<Tokenizer> FromJson(const std::string& name, const json& j) {
  return LoadTokenizerJson(WriteTemp(name, j.dump()), nullptr);
}

json TinyBpe() {
  return {{"type", "BPE"},
          {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"-", 3}, {"ab", 4}, {" ", 5}}},
          {"merges", json::array({"a b"})}};
}

TEST(HfTokenizerJsonTest, SplitBehaviors) {
  auto with_split = [](const char* behavior, bool invert) {
    return json{{"model", TinyBpe()},
                {"pre_tokenizer",
                 {{"type", "Split"},
                  {"pattern", {{"String", "-"}}},
                  {"behavior", behavior},
                  {"invert", invert}}}};
  };
  // "ab-ab": Isolated keeps "-" alone; Removed drops it; merges never cross a split.
  EXPECT_EQ(FromJson("iso.json", with_split("Isolated", false))->Encode("ab-ab", {}),
            (std::vector<int32_t>{4, 3, 4}));
  EXPECT_EQ(FromJson("rem.json", with_split("Removed", false))->Encode("ab-ab", {}),
            (std::vector<int32_t>{4, 4}));
  // "a-b": MergedWithPrevious gives "a-", "b"; MergedWithNext "a", "-b" (same ids,
  // but "ab" is never formed across the split).
  EXPECT_EQ(FromJson("prev.json", with_split("MergedWithPrevious", false))->Encode("a-b", {}),
            (std::vector<int32_t>{0, 3, 1}));
  EXPECT_EQ(FromJson("next.json", with_split("MergedWithNext", false))->Encode("ab-", {}),
            (std::vector<int32_t>{4, 3}));
  // Inverted Removed keeps only the matches.
  EXPECT_EQ(FromJson("inv.json", with_split("Removed", true))->Encode("ab-ab", {}),
            (std::vector<int32_t>{3}));
}

TEST(HfTokenizerJsonTest, AddedTokensSpecialOnlyWhenParsed) {
  json j = {{"model", TinyBpe()},
            {"added_tokens",
             json::array({{{"id", 6}, {"content", "<x>"}, {"special", true}},
                          {{"id", 7}, {"content", "cc"}, {"special", false}, {"rstrip", true}}})}};
  auto tok = FromJson("added.json", j);
  EncodeOptions plain;
  EncodeOptions parse;
  parse.parse_special = true;
  // The non-special added token is always matched and swallows the space after it.
  EXPECT_EQ(tok->Encode("cc ab", plain), (std::vector<int32_t>{7, 4}));
  EXPECT_EQ(tok->Encode("ab<x>", parse), (std::vector<int32_t>{4, 6}));
  EXPECT_TRUE(tok->IsSpecial(6));
  EXPECT_FALSE(tok->IsSpecial(7));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{4, 6, 7}),
            "ab cc");  // no decoder: pieces joined by ' '
}

}  // namespace
}  // namespace pagoda
