#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <numeric>

#include "engine/generator.h"
#include "eval/kv_eval.h"

namespace pagoda::testing {

std::string FixturesDir() {
  if (const char* env = std::getenv("PAGODA_FIXTURES"); env != nullptr && *env != '\0') return env;
  return std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

std::string Fixture(const std::string& relative) {
  std::string path = FixturesDir() + "/" + relative;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    ADD_FAILURE() << "fixture missing: " << path << " (set PAGODA_FIXTURES)";
  }
  return path;
}

std::vector<float> AllLogits(Model& model, const std::vector<int32_t>& ids, DType kv_dtype,
                             int64_t block_size, int64_t chunk, const ForwardObserver* observer,
                             KVCache* cache_out) {
  if (cache_out != nullptr) return ChunkedSequenceLogits(model, ids, *cache_out, chunk, observer);
  const int64_t num_blocks = (static_cast<int64_t>(ids.size()) + block_size - 1) / block_size;
  std::unique_ptr<KVCache> local = model.backend().CreateKVCache(model.KVShapeFor(num_blocks, block_size, kv_dtype));
  return ChunkedSequenceLogits(model, ids, *local, chunk, observer);
}

std::vector<int32_t> GoldenIds(const SafetensorsFile& golden, const std::string& s) {
  const auto ids = golden.ReadI64("input_ids." + s);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

LogitErrors CheckGoldenLogits(const std::vector<float>& logits, int64_t vocab,
                              const SafetensorsFile& golden, const std::string& s, double tol,
                              int64_t max_outlier_positions) {
  SCOPED_TRACE("logits of sequence " + s);
  LogitErrors e;
  const auto top_ids = golden.ReadI64("topk_ids." + s);
  const auto top_logits = golden.ReadF32("topk_logits." + s);
  const int64_t n = static_cast<int64_t>(logits.size()) / vocab;
  const int64_t k = static_cast<int64_t>(top_ids.size()) / n;
  EXPECT_EQ(k, 8);
  EXPECT_EQ(static_cast<int64_t>(top_ids.size()), n * k);
  if (k != 8 || static_cast<int64_t>(top_ids.size()) != n * k) return e;
  int64_t failures = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = &logits[t * vocab];
    if (t + 1 < n && e.outliers < max_outlier_positions) {
      double worst = 0.0;
      for (int64_t j = 0; j < k; ++j) worst = std::max(worst, std::fabs(double{row[top_ids[t * k + j]]} - top_logits[t * k + j]));
      if (worst > tol) {
        ++e.outliers;
        std::printf("[measured] position %lld excused: top-8 logit error %.3g\n", static_cast<long long>(t), worst);
        continue;
      }
    }
    for (int64_t j = 0; j < k; ++j) {
      const double diff = std::fabs(row[top_ids[t * k + j]] - top_logits[t * k + j]);
      e.topk = std::max(e.topk, diff);
      if (diff > tol && ++failures <= 3) {
        ADD_FAILURE() << "position " << t << " rank " << j << " token " << top_ids[t * k + j]
                      << ": " << row[top_ids[t * k + j]] << " vs golden " << top_logits[t * k + j];
      }
    }
    // No other token may rise above the golden 8th-largest logit by more than tol.
    std::vector<float> sorted(row, row + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    EXPECT_LE(sorted[k - 1], top_logits[t * k + k - 1] + tol) << "position " << t;
  }
  const auto last = golden.ReadF32("logits_last." + s);
  EXPECT_EQ(static_cast<int64_t>(last.size()), vocab);
  if (static_cast<int64_t>(last.size()) != vocab) return e;
  for (int64_t i = 0; i < vocab; ++i) {
    const double diff = std::fabs(logits[(n - 1) * vocab + i] - last[i]);
    e.last = std::max(e.last, diff);
    if (diff > tol && ++failures <= 6) {
      ADD_FAILURE() << "last position, token " << i << ": " << logits[(n - 1) * vocab + i]
                    << " vs golden " << last[i];
    }
  }
  EXPECT_LE(e.topk, tol) << "worst top-8 logit error";
  EXPECT_LE(e.last, tol) << "worst last-position logit error";
  ::testing::Test::RecordProperty("max_topk_logit_error_" + s, std::to_string(e.topk));
  ::testing::Test::RecordProperty("max_last_logit_error_" + s, std::to_string(e.last));
  return e;
}

void CheckGoldenGreedy(Model& model, const SafetensorsFile& golden, const std::string& s, double min_margin) {
  SCOPED_TRACE("greedy of sequence " + s);
  const auto ids = GoldenIds(golden, s);
  const auto want64 = golden.ReadI64("greedy." + s);
  const std::vector<int32_t> want(want64.begin(), want64.end());
  const auto margin = golden.ReadF32("greedy_margin." + s);
  GeneratorOptions options;
  options.kv_dtype = DType::kF32;
  options.max_model_len = static_cast<int64_t>(ids.size() + want.size()) + 1;
  Generator gen(model, options);
  GenerateRequest req;
  req.prompt = ids;
  req.sampling.temperature = 0.0;
  req.max_tokens = static_cast<int64_t>(want.size());
  req.ignore_eos = true;
  const auto out = gen.Generate(req).output;
  for (size_t i = 0; i < want.size(); ++i) {
    if (margin[i] < min_margin) break;  // the model's rounding may legitimately pick another token from here on
    ASSERT_LT(i, out.size());
    ASSERT_EQ(out[i], want[i]) << "greedy step " << i << " (margin " << margin[i] << ")";
  }
}

LogitErrors CheckSequence(Model& model, const SafetensorsFile& golden, const std::string& s,
                          double tol, bool check_greedy, int64_t max_outlier_positions) {
  SCOPED_TRACE("sequence " + s);
  const auto logits = AllLogits(model, GoldenIds(golden, s), DType::kF32);
  const LogitErrors e = CheckGoldenLogits(logits, model.spec().vocab_size, golden, s, tol, max_outlier_positions);
  // Each logit may be off by tol, so a top-2 margin under 2 tol may flip (1e-3 for f32 paths).
  if (check_greedy) CheckGoldenGreedy(model, golden, s, tol <= 1e-3 ? 1e-3 : 2 * tol);
  return e;
}

std::vector<int32_t> GreedyWithCache(Model& model, KVCache& cache, const std::vector<int32_t>& prompt,
                                     int64_t steps) {
  const int64_t vocab = model.spec().vocab_size;
  std::vector<int32_t> table(cache.shape().num_blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  std::vector<int32_t> out, seq = prompt;
  std::vector<float> logits(vocab);
  int64_t pos = 0;
  StepBuilder builder;
  for (int64_t g = 0; g < steps; ++g) {
    const int64_t count = static_cast<int64_t>(seq.size()) - pos;
    ForwardSequence(model, cache, builder, seq, pos, count, table, LogitRows::kLast, logits.data());
    pos += count;
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

EngineConfig SmallEngineConfig(int64_t num_blocks, int64_t block_size, bool prefix_caching, int64_t budget,
                               KVCacheDType kv_dtype) {
  EngineConfig c;
  c.kv.num_blocks = num_blocks;
  c.kv.block_size = block_size;
  c.kv.dtype = kv_dtype;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 64;
  c.enable_prefix_caching = prefix_caching;
  return c;
}

std::map<int64_t, std::vector<int32_t>> RunEngine(Engine& engine, const std::vector<RequestSpec>& specs,
                                                  std::map<int64_t, std::string>* texts) {
  std::map<int64_t, std::vector<int32_t>> out;
  for (const auto& s : specs) engine.AddRequest(s);
  int guard = 0;
  while (engine.HasUnfinished() && ++guard < 100000) {
    for (const RequestOutput& o : engine.Step()) {
      auto& v = out[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (texts != nullptr) (*texts)[o.request_id] += o.new_text;
    }
  }
  EXPECT_FALSE(engine.HasUnfinished());
  return out;
}

std::vector<int32_t> GreedyAlone(Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens, DType kv_dtype,
                                 int64_t max_model_len) {
  GeneratorOptions o;
  o.kv_dtype = kv_dtype;
  o.max_model_len = max_model_len;
  Generator g(model, o);
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return g.Generate(r).output;
}

}  // namespace pagoda::testing
