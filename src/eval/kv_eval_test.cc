// stories260K on a prefix of the TinyStories corpus: the perplexity of every quantized KV
// format against bf16 KV, measured the way `pagoda eval perplexity` does (kv_eval.h); plus
// the windowing rules. The targets are fp8_e4m3 and int8 within 0.5%, int4 and
// nvfp4 within 3%, kivi2 within 10%. int8 meets its target; the others do not on this model
// (its heads are 8 wide and its keys have one large channel per head that sets every
// per-token scale, flattening the small channels the queries weigh most: see
// docs/quantization.md, "Targets missed"). So each format is held to a guard just above what
// it measures here, which catches regressions, and the test prints the target it misses.
// With the query-aware mixed-precision policy (--kv-heavy-tokens) fp8_e4m3, kivi2 and
// nvfp4 meet their targets; those rows assert them.
#include "eval/kv_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pagoda {
namespace {

std::string FixturesDir() {
  const char* env = std::getenv("PAGODA_FIXTURES");
  return env != nullptr ? env : std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

std::string ReadPrefix(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path << " is missing";
  std::string s(bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

TEST(KVEvalTest, WindowsScoreEveryTokenOnce) {
  for (int64_t n : {2, 10, 255, 256, 257, 1000}) {
    PerplexityOptions o;
    o.window = 64;
    o.stride = 24;
    int64_t next = 1;
    for (const EvalWindow& w : MakeWindows(n, o)) {
      EXPECT_LE(w.length, 64);
      EXPECT_EQ(w.start + w.first_scored, next);
      if (w.start > 0) {
        EXPECT_GE(w.first_scored, 64 - 24);  // at least W - S tokens of context
      }
      next = w.start + w.length;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(KVEvalTest, Stories260KPerplexityBandsPerFormat) {
  const std::string model_path = FixturesDir() + "/models/stories260K/stories260K.gguf";
  auto model = LoadModel(model_path);
  auto tokenizer = LoadTokenizerForModel(model_path, "", model->spec().vocab_size);
  ASSERT_NE(tokenizer, nullptr);
  // The first 2048 tokens of the corpus; windows of 256, stride 128.
  const std::string text =
      ReadPrefix(FixturesDir() + "/corpora/tinystories-first2MiB.txt", 64 << 10);
  const std::vector<int32_t> stream = CorpusStream(*tokenizer, text, 2048);
  ASSERT_EQ(stream.size(), 2048u);
  PerplexityOptions o;
  o.window = 256;
  KVCacheChoice bf16;
  const PerplexityResult base = Perplexity(*model, stream, tokenizer->bos_id(), bf16, o);
  EXPECT_GT(base.tokens, 2000);
  EXPECT_NEAR(base.perplexity, 3.727, 0.01);  // docs/quantization.md
  // Measured (2048 tokens): fp8_e4m3 +0.82%, fp8_e5m2 +4.2%, int8 -0.03%, int4 +196%,
  // nvfp4 +69%, kivi2 +12.9%.
  // With the query-aware policy (--kv-heavy-tokens K: per block of 16, the K tokens with the
  // most attention mass stay bf16): fp8_e4m3 +0.25%, kivi2 +8.3%, nvfp4 (K = 4) +2.96%,
  // int4 +11.8%.
  const struct {
    KVCacheDType dtype;
    int64_t heavy;
    double target, guard;
  } cases[] = {{KVCacheDType::kFp8E4M3, 0, 0.005, 0.012}, {KVCacheDType::kFp8E5M2, 0, 0.05, 0.05},
               {KVCacheDType::kInt8, 0, 0.005, 0.005},    {KVCacheDType::kInt4, 0, 0.03, 2.2},
               {KVCacheDType::kNvfp4, 0, 0.03, 0.8},      {KVCacheDType::kKivi2, 0, 0.10, 0.15},
               {KVCacheDType::kFp8E4M3, 2, 0.005, 0.005}, {KVCacheDType::kKivi2, 2, 0.10, 0.10},
               {KVCacheDType::kNvfp4, 4, 0.03, 0.035},    {KVCacheDType::kInt4, 2, 0.03, 0.15}};
  for (const auto& c : cases) {
    KVCacheChoice q;
    q.dtype = c.dtype;
    q.quant.heavy_tokens = c.heavy;
    const PerplexityResult r = Perplexity(*model, stream, tokenizer->bos_id(), q, o);
    const double delta = r.perplexity / base.perplexity - 1.0;
    std::printf("%-8s heavy %lld: perplexity %.5f (bf16 %.5f): %+.3f%% (target %.1f%%: %s)\n",
                std::string(KVCacheDTypeName(c.dtype)).c_str(), static_cast<long long>(c.heavy),
                r.perplexity, base.perplexity, 100 * delta, 100 * c.target,
                std::fabs(delta) < c.target ? "met" : "MISSED");
    EXPECT_EQ(r.tokens, base.tokens);
    EXPECT_LT(std::fabs(delta), c.guard) << KVCacheDTypeName(c.dtype) << " heavy " << c.heavy;
  }
}

}  // namespace
}  // namespace pagoda
