#include "eval/kv_eval.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace pagoda {
namespace {

// log-softmax of one row of logits, in double.
void LogSoftmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(n);
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double{logits[i]});
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double{logits[i]} - m);
  const double lse = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

int64_t ArgMax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

std::vector<int32_t> WindowIds(const std::vector<int32_t>& stream, const EvalWindow& w,
                               int32_t bos) {
  std::vector<int32_t> ids(stream.begin() + w.start, stream.begin() + w.start + w.length);
  ids[0] = bos;
  return ids;
}

}  // namespace

KVStorageShape EvalCacheShape(const Model& model, const KVCacheChoice& c, int64_t num_tokens) {
  const int64_t bs = c.quant.block_size;
  const int64_t num_blocks = (num_tokens + bs - 1) / bs;
  const DType wide = c.dtype == KVCacheDType::kF32   ? DType::kF32
                     : c.dtype == KVCacheDType::kF16 ? DType::kF16
                                                     : DType::kBF16;
  return ApplyKVCacheFormat(model.KVShapeFor(num_blocks, bs, wide), c.dtype, c.quant,
                            model.spec().kv_shape().mla);
}

std::vector<float> ChunkedSequenceLogits(Model& model, const std::vector<int32_t>& ids, KVCache& cache,
                                         int64_t chunk, const ForwardObserver* observer) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t vocab = model.spec().vocab_size;
  const int64_t bs = cache.shape().block_size;
  const int64_t num_blocks = (n + bs - 1) / bs;
  PAGODA_CHECK(num_blocks <= cache.shape().num_blocks) << "cache of " << cache.shape().num_blocks
                                                       << " blocks for " << n << " tokens";
  std::vector<int32_t> table(num_blocks);
  std::iota(table.rbegin(), table.rend(), 0);  // scrambled: real paging
  std::vector<float> logits(n * vocab);
  StepBuilder builder;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t m = std::min(chunk, n - start);
    ForwardSequence(model, cache, builder, ids, start, m, table, LogitRows::kAll, logits.data() + start * vocab,
                    observer);
  }
  return logits;
}

std::vector<float> SequenceLogits(Model& model, const std::vector<int32_t>& ids,
                                  const KVCacheChoice& choice, int64_t chunk) {
  std::unique_ptr<KVCache> cache =
      model.backend().CreateKVCache(EvalCacheShape(model, choice, static_cast<int64_t>(ids.size())));
  return ChunkedSequenceLogits(model, ids, *cache, chunk);
}

std::vector<int32_t> CorpusStream(const Tokenizer& tokenizer, const std::string& text,
                                  int64_t max_tokens) {
  const int32_t bos = tokenizer.bos_id();
  PAGODA_ENSURE(bos >= 0, ErrorCode::kInvalidArgument,
                "the tokenizer has no BOS token to start documents with");
  static const std::string kSeparator = "<|endoftext|>";
  std::vector<int32_t> stream;
  EncodeOptions options;
  options.add_special_tokens = false;
  size_t pos = 0;
  while (pos <= text.size() &&
         (max_tokens <= 0 || static_cast<int64_t>(stream.size()) < max_tokens)) {
    size_t end = text.find(kSeparator, pos);
    if (end == std::string::npos) end = text.size();
    const std::string doc = Trim(text.substr(pos, end - pos));
    if (!doc.empty()) {
      stream.push_back(bos);
      const std::vector<int32_t> ids = tokenizer.Encode(doc, options);
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
    pos = end + kSeparator.size();
  }
  if (max_tokens > 0 && static_cast<int64_t>(stream.size()) > max_tokens) stream.resize(max_tokens);
  return stream;
}

std::vector<EvalWindow> MakeWindows(int64_t n, const PerplexityOptions& o) {
  PAGODA_ENSURE(o.window >= 2, ErrorCode::kInvalidArgument,
                "the window must hold at least 2 tokens");
  const int64_t stride = o.stride > 0 ? o.stride : o.window / 2;
  PAGODA_ENSURE(stride >= 1 && stride <= o.window - 1, ErrorCode::kInvalidArgument,
                "the stride must be in 1.." << o.window - 1);
  std::vector<EvalWindow> windows;
  int64_t scored_until = 1;  // stream index of the next target
  for (int64_t start = 0; scored_until < n; start += stride) {
    EvalWindow w;
    w.start = start;
    w.length = std::min(o.window, n - start);
    w.first_scored = scored_until - start;
    if (w.length >= 2 && w.first_scored < w.length) windows.push_back(w);
    scored_until = start + w.length;
  }
  return windows;
}

PerplexityResult Perplexity(Model& model, const std::vector<int32_t>& stream, int32_t bos,
                            const KVCacheChoice& choice, const PerplexityOptions& options,
                            const EvalProgress& progress) {
  const int64_t vocab = model.spec().vocab_size;
  const std::vector<EvalWindow> windows = MakeWindows(static_cast<int64_t>(stream.size()), options);
  double nll = 0;
  int64_t count = 0;
  std::vector<double> lp;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const EvalWindow& w = windows[wi];
    const std::vector<float> logits = SequenceLogits(model, WindowIds(stream, w, bos), choice);
    for (int64_t i = w.first_scored; i < w.length; ++i) {
      const int32_t target = stream[w.start + i];
      if (target == bos) continue;
      LogSoftmax(&logits[(i - 1) * vocab], vocab, lp);
      nll -= lp[target];
      ++count;
    }
    if (progress) progress(static_cast<int64_t>(wi) + 1, static_cast<int64_t>(windows.size()));
  }
  PerplexityResult r;
  r.tokens = count;
  r.nll_mean = count > 0 ? nll / count : 0.0;
  r.perplexity = std::exp(r.nll_mean);
  return r;
}

KLResult CompareKV(Model& model, const std::vector<int32_t>& stream, int32_t bos,
                   const KVCacheChoice& reference, const KVCacheChoice& test,
                   const PerplexityOptions& options, const EvalProgress& progress) {
  const int64_t vocab = model.spec().vocab_size;
  const std::vector<EvalWindow> windows = MakeWindows(static_cast<int64_t>(stream.size()), options);
  std::vector<double> kls;
  double nll_ref = 0, nll_test = 0;
  int64_t agree = 0;
  std::vector<double> p, q;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const EvalWindow& w = windows[wi];
    const std::vector<int32_t> ids = WindowIds(stream, w, bos);
    const std::vector<float> a = SequenceLogits(model, ids, reference);
    const std::vector<float> b = SequenceLogits(model, ids, test);
    for (int64_t i = w.first_scored; i < w.length; ++i) {
      const int32_t target = stream[w.start + i];
      if (target == bos) continue;
      const float* la = &a[(i - 1) * vocab];
      const float* lb = &b[(i - 1) * vocab];
      LogSoftmax(la, vocab, p);
      LogSoftmax(lb, vocab, q);
      double kl = 0;
      for (int64_t j = 0; j < vocab; ++j) kl += std::exp(p[j]) * (p[j] - q[j]);
      kls.push_back(std::max(kl, 0.0));
      nll_ref -= p[target];
      nll_test -= q[target];
      agree += ArgMax(la, vocab) == ArgMax(lb, vocab);
    }
    if (progress) progress(static_cast<int64_t>(wi) + 1, static_cast<int64_t>(windows.size()));
  }
  KLResult r;
  r.tokens = static_cast<int64_t>(kls.size());
  if (r.tokens == 0) return r;
  r.kl_mean = std::accumulate(kls.begin(), kls.end(), 0.0) / r.tokens;
  std::vector<double> sorted = kls;
  std::sort(sorted.begin(), sorted.end());
  r.kl_p99 =
      sorted[std::min<int64_t>(r.tokens - 1, static_cast<int64_t>(std::ceil(0.99 * r.tokens)) - 1)];
  r.top1_agreement = static_cast<double>(agree) / r.tokens;
  for (auto [res, nll] : {std::pair{&r.reference, nll_ref}, std::pair{&r.test, nll_test}}) {
    res->tokens = r.tokens;
    res->nll_mean = nll / r.tokens;
    res->perplexity = std::exp(res->nll_mean);
  }
  return r;
}

RetrievalResult Retrieval(Model& model, const Tokenizer& tokenizer, const KVCacheChoice& choice,
                          const RetrievalOptions& o, const EvalProgress& progress) {
  PAGODA_ENSURE(o.context >= 16 && o.trials >= 1, ErrorCode::kInvalidArgument,
                "retrieval needs --context >= 16 and --trials >= 1");
  EncodeOptions plain;
  plain.add_special_tokens = false;
  const std::vector<int32_t> filler = tokenizer.Encode(
      " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
      plain);
  const std::vector<int32_t> question =
      tokenizer.Encode(" What is the pass key? The pass key is", plain);
  PAGODA_ENSURE(!filler.empty(), ErrorCode::kInvalidArgument,
                "the tokenizer encodes the filler text to nothing");
  std::mt19937_64 rng(o.seed);
  RetrievalResult r;
  r.trials = o.trials;
  const int64_t vocab = model.spec().vocab_size;
  for (int64_t trial = 0; trial < o.trials; ++trial) {
    const std::string key = std::to_string(10000 + rng() % 90000);
    const std::vector<int32_t> needle = tokenizer.Encode(
        " The pass key is " + key + ". Remember it. " + key + " is the pass key.", plain);
    const int64_t budget =
        std::max<int64_t>(o.context - 1 - static_cast<int64_t>(needle.size() + question.size()), 0);
    const int64_t reps = budget / static_cast<int64_t>(filler.size());
    const int64_t depth = reps > 0 ? static_cast<int64_t>(rng() % (reps + 1)) : 0;
    std::vector<int32_t> ids;
    if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
    for (int64_t i = 0; i < reps; ++i) {
      if (i == depth) ids.insert(ids.end(), needle.begin(), needle.end());
      ids.insert(ids.end(), filler.begin(), filler.end());
    }
    if (depth == reps) ids.insert(ids.end(), needle.begin(), needle.end());
    ids.insert(ids.end(), question.begin(), question.end());
    const int64_t total = static_cast<int64_t>(ids.size()) + o.max_new_tokens;
    PAGODA_ENSURE(total <= model.spec().max_position, ErrorCode::kInvalidArgument,
                  "--context " << o.context << " needs " << total << " positions but the model has "
                               << model.spec().max_position);
    std::unique_ptr<KVCache> cache = model.backend().CreateKVCache(EvalCacheShape(model, choice, total));
    std::vector<int32_t> table(cache->shape().num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::vector<int32_t> generated;
    std::vector<float> logits(vocab);
    std::vector<int32_t> seq = ids;  // the sequence so far: the prompt, then the generated ids
    int64_t pos = 0;
    StepBuilder builder;
    for (int64_t g = 0; g < o.max_new_tokens; ++g) {
      const int64_t count = static_cast<int64_t>(seq.size()) - pos;
      ForwardSequence(model, *cache, builder, seq, pos, count, table, LogitRows::kLast, logits.data());
      pos += count;
      const int32_t next = static_cast<int32_t>(ArgMax(logits.data(), vocab));
      generated.push_back(next);
      seq.push_back(next);
    }
    if (tokenizer.Decode(generated).find(key) != std::string::npos) ++r.correct;
    if (progress) progress(trial + 1, o.trials);
  }
  r.accuracy = static_cast<double>(r.correct) / r.trials;
  return r;
}

}  // namespace pagoda
