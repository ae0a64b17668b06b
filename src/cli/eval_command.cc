// `pagoda eval`: what a KV-cache format costs in accuracy (src/eval/kv_eval.h defines the
// measurements; docs/quantization.md has the numbers).
//   pagoda eval perplexity --model M --data FILE [--kv-cache-dtype D] [--max-model-len W]
//                          [--stride S] [--max-tokens N] [--json]
//   pagoda eval kl --model M --data FILE --kv-cache-dtype D [--reference-kv-cache-dtype bf16]
//   [--json] pagoda eval retrieval --model M --context N --trials K [--kv-cache-dtype D] [--json]
// A progress line goes to stderr; results to stdout (one JSON object with --json).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/error.h"
#include "eval/kv_eval.h"

namespace pagoda::cli {
namespace {

struct EvalFlags {
  ModelFlags model;
  std::string data;
  std::string reference_dtype = "bf16";
  int64_t stride = 0;
  int64_t max_tokens = 0;
  int64_t context = 1024;
  int64_t trials = 10;
  uint64_t seed = 1;
  bool json = false;
};

EvalProgress Progress(const char* what) {
  return [what](int64_t done, int64_t total) {
    std::fprintf(stderr, "\r[eval %s] %lld/%lld", what, static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PAGODA_ENSURE(in.good(), ErrorCode::kNotFound, "--data: cannot open " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

KVCacheChoice Choice(const EvalFlags& f, const Model& model, const std::string& dtype) {
  const KVCacheDType model_default =
      model.spec().weight_dtype == DType::kF32 ? KVCacheDType::kF32 : KVCacheDType::kBF16;
  KVCacheChoice c;
  c.dtype = ParseKVCacheDType(dtype, model_default);
  c.quant = f.model.KVQuant();
  return c;
}

PerplexityOptions Windows(const EvalFlags& f, const Model& model) {
  PerplexityOptions o;
  o.window = f.model.max_model_len > 0 ? f.model.max_model_len
                                       : std::min<int64_t>(model.spec().max_position, 256);
  o.stride = f.stride;
  return o;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded Load(const EvalFlags& f) {
  Loaded l;
  l.model = f.model.LoadModel();
  l.tokenizer = f.model.LoadTokenizer(*l.model);
  PAGODA_ENSURE(l.tokenizer != nullptr, ErrorCode::kInvalidArgument,
                f.model.model << " has no tokenizer; pass --tokenizer PATH");
  return l;
}

int RunPerplexity(const EvalFlags& f) {
  Loaded l = Load(f);
  const KVCacheChoice c = Choice(f, *l.model, f.model.kv_cache_dtype);
  const std::vector<int32_t> stream = CorpusStream(*l.tokenizer, ReadFile(f.data), f.max_tokens);
  const PerplexityOptions o = Windows(f, *l.model);
  const PerplexityResult r =
      Perplexity(*l.model, stream, l.tokenizer->bos_id(), c, o, Progress("perplexity"));
  if (f.json) {
    nlohmann::json j = {
        {"perplexity", r.perplexity}, {"tokens", r.tokens},
        {"nll_mean", r.nll_mean},     {"kv_cache_dtype", KVCacheDTypeName(c.dtype)},
        {"window", o.window},         {"stride", o.stride > 0 ? o.stride : o.window / 2}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity %.6f over %lld tokens (kv %s, window %lld)\n", r.perplexity,
                static_cast<long long>(r.tokens), std::string(KVCacheDTypeName(c.dtype)).c_str(),
                static_cast<long long>(o.window));
  }
  return 0;
}

int RunKL(const EvalFlags& f) {
  Loaded l = Load(f);
  const KVCacheChoice test = Choice(f, *l.model, f.model.kv_cache_dtype);
  const KVCacheChoice ref = Choice(f, *l.model, f.reference_dtype);
  const std::vector<int32_t> stream = CorpusStream(*l.tokenizer, ReadFile(f.data), f.max_tokens);
  const KLResult r = CompareKV(*l.model, stream, l.tokenizer->bos_id(), ref, test,
                               Windows(f, *l.model), Progress("kl"));
  if (f.json) {
    nlohmann::json j = {{"kl_mean", r.kl_mean},
                        {"kl_p99", r.kl_p99},
                        {"top1_agreement", r.top1_agreement},
                        {"tokens", r.tokens},
                        {"perplexity", r.test.perplexity},
                        {"perplexity_reference", r.reference.perplexity},
                        {"kv_cache_dtype", KVCacheDTypeName(test.dtype)},
                        {"reference_kv_cache_dtype", KVCacheDTypeName(ref.dtype)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "kl_mean %.6g kl_p99 %.6g top1_agreement %.4f over %lld tokens; perplexity %.5f vs %.5f "
        "(%s)\n",
        r.kl_mean, r.kl_p99, r.top1_agreement, static_cast<long long>(r.tokens), r.test.perplexity,
        r.reference.perplexity, std::string(KVCacheDTypeName(ref.dtype)).c_str());
  }
  return 0;
}

int RunRetrieval(const EvalFlags& f) {
  Loaded l = Load(f);
  const KVCacheChoice c = Choice(f, *l.model, f.model.kv_cache_dtype);
  RetrievalOptions o;
  o.context = f.context;
  o.trials = f.trials;
  o.seed = f.seed;
  const RetrievalResult r = Retrieval(*l.model, *l.tokenizer, c, o, Progress("retrieval"));
  if (f.json) {
    nlohmann::json j = {{"accuracy", r.accuracy},
                        {"correct", r.correct},
                        {"trials", r.trials},
                        {"context", o.context},
                        {"kv_cache_dtype", KVCacheDTypeName(c.dtype)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("accuracy %.3f (%lld/%lld) at context %lld\n", r.accuracy,
                static_cast<long long>(r.correct), static_cast<long long>(r.trials),
                static_cast<long long>(o.context));
  }
  return 0;
}

}  // namespace

void AddEvalCommand(CLI::App& root, Action* action) {
  static EvalFlags f;
  CLI::App* eval =
      root.add_subcommand("eval", "accuracy of a KV-cache format: perplexity, kl, retrieval");
  eval->require_subcommand(1);
  CLI::App* ppl = eval->add_subcommand("perplexity", "sliding-window perplexity over a text file");
  CLI::App* kl =
      eval->add_subcommand("kl", "KL divergence and top-1 agreement against a bf16-KV run");
  CLI::App* ret = eval->add_subcommand("retrieval", "passkey retrieval at a given context length");
  for (CLI::App* c : {ppl, kl, ret}) {
    f.model.Add(c);
    c->add_flag("--json", f.json, "print one JSON object");
  }
  for (CLI::App* c : {ppl, kl}) {
    c->add_option("--data", f.data, "text file (documents separated by <|endoftext|>)")->required();
    c->add_option("--stride", f.stride, "window stride (default: half the window)");
    c->add_option("--max-tokens", f.max_tokens,
                  "use only the first N tokens of the stream (0: all)");
  }
  kl->add_option("--reference-kv-cache-dtype", f.reference_dtype, "the reference run's KV dtype")
      ->capture_default_str();
  ret->add_option("--context", f.context, "prompt length in tokens")->capture_default_str();
  ret->add_option("--trials", f.trials, "number of planted keys")->capture_default_str();
  ret->add_option("--seed", f.seed, "random seed of keys and depths")->capture_default_str();
  ppl->callback([action] { *action = [] { return RunPerplexity(f); }; });
  kl->callback([action] { *action = [] { return RunKL(f); }; });
  ret->callback([action] { *action = [] { return RunRetrieval(f); }; });
}

}  // namespace pagoda::cli
