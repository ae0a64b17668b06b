// Accuracy of a KV-cache format, measured by running a model over text through
// Model::Forward with a cache of that format (pagoda eval perplexity | kl | retrieval).
//
// Perplexity (defined once, computed the same way for every format; docs/quantization.md):
//   stream   the text is split on "<|endoftext|>"; each non-empty document (trimmed) is
//            tokenized without special tokens and preceded by BOS; the documents are
//            concatenated (optionally cut to max_tokens).
//   windows  of W tokens (--max-model-len) starting at 0, S, 2S, ... (S = stride, default
//            W/2) until one reaches the end; each window runs on a fresh cache at positions
//            0..W-1 with its first token replaced by BOS.
//   scored   window k scores the tokens from the previous window's end (1 for the first
//            window) to its own end, each predicted from the logits of the token before it,
//            so every token is scored once with at least W - S - 1 tokens of context
//            (except in the first window). Targets that are BOS (document starts) are not
//            scored: the separator carries no text to predict.
//   ppl      exp(mean negative log-likelihood over the scored tokens), in double.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kv/kv_layout.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// A KV cache format and its options.
struct KVCacheChoice {
  KVCacheDType dtype = KVCacheDType::kBF16;
  KVQuantOptions quant;  // quant.block_size is the cache's block size
};

// The KVStorageShape of `choice` for `model` with room for num_tokens tokens.
KVStorageShape EvalCacheShape(const Model& model, const KVCacheChoice& choice, int64_t num_tokens);

// Logits [n, vocab] of every position of one sequence, run through `cache` in chunks of
// `chunk` tokens. Block j of the sequence is cache block ceil(n / block size) - 1 - j (a
// reversed table, so paging is real); the cache needs at least that many blocks.
std::vector<float> ChunkedSequenceLogits(Model& model, const std::vector<int32_t>& ids, KVCache& cache,
                                         int64_t chunk, const ForwardObserver* observer = nullptr);

// Runs ids through the model at positions 0..n-1 on a fresh cache of `choice` (one prefill
// of `chunk` tokens at a time, blocks in scrambled order); returns logits [n, vocab] f32.
std::vector<float> SequenceLogits(Model& model, const std::vector<int32_t>& ids,
                                  const KVCacheChoice& choice, int64_t chunk = 1 << 30);

// The token stream described above. REQUIRES: tokenizer has a BOS (bos_id() >= 0).
std::vector<int32_t> CorpusStream(const Tokenizer& tokenizer, const std::string& text,
                                  int64_t max_tokens);

struct PerplexityOptions {
  int64_t window = 256;  // W
  int64_t stride = 0;    // S; 0 means W / 2
};

struct EvalWindow {
  int64_t start = 0, length = 0;  // stream[start, start + length)
  int64_t first_scored = 0;       // first target, an index into the window (>= 1)
};
std::vector<EvalWindow> MakeWindows(int64_t num_tokens, const PerplexityOptions& options);

struct PerplexityResult {
  double perplexity = 0;
  double nll_mean = 0;
  int64_t tokens = 0;  // scored tokens
};

struct KLResult {
  double kl_mean = 0;         // mean over scored tokens of KL(P_reference || P_test), nats
  double kl_p99 = 0;          // 99th percentile
  double top1_agreement = 0;  // fraction of scored tokens with the same argmax
  int64_t tokens = 0;
  PerplexityResult reference, test;
};

// Called after each window with (windows done, windows total).
using EvalProgress = std::function<void(int64_t, int64_t)>;

PerplexityResult Perplexity(Model& model, const std::vector<int32_t>& stream, int32_t bos,
                            const KVCacheChoice& choice, const PerplexityOptions& options,
                            const EvalProgress& progress = nullptr);

// Both runs over the same windows: `reference` (usually bf16 KV) and `test`.
KLResult CompareKV(Model& model, const std::vector<int32_t>& stream, int32_t bos,
                   const KVCacheChoice& reference, const KVCacheChoice& test,
                   const PerplexityOptions& options, const EvalProgress& progress = nullptr);

struct RetrievalOptions {
  int64_t context = 1024;  // prompt length in tokens (about)
  int64_t trials = 10;
  uint64_t seed = 1;
  int64_t max_new_tokens = 8;
};
struct RetrievalResult {
  double accuracy = 0;
  int64_t trials = 0;
  int64_t correct = 0;
};
// Passkey retrieval: a 5-digit key planted at a random depth of filler text; the model is
// asked for it at the end and decodes greedily; a trial is correct when the key appears in
// the generated text.
RetrievalResult Retrieval(Model& model, const Tokenizer& tokenizer, const KVCacheChoice& choice,
                          const RetrievalOptions& options, const EvalProgress& progress = nullptr);

}  // namespace pagoda
