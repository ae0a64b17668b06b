// `pagoda eval loglikelihood`: the log-probability of text under the model, from the
// forward pass `pagoda eval` uses (SequenceLogits: one sequence on a fresh cache), as the
// reference that the server's prompt logprobs (echo, prompt_logprobs) and an evaluation
// harness driving the server are checked against.
//
//   pagoda eval loglikelihood --model M --data FILE.jsonl [--json]
//
// Each line of FILE is one of
//   {"context": C, "continuation": X}   lm-evaluation-harness's loglikelihood request,
//        tokenized as it tokenizes one against a server (/tokenize: no special tokens):
//        trailing spaces of C move to X, ids = encode(C + X), the context is encode(C)'s
//        length; an empty C is the BOS token (else EOS). Scored: X's tokens.
//   {"prompt_ids": [...]}               ids as given; scored: every token but the first.
// Output per line: loglikelihood (the sum over scored tokens), is_greedy (each scored token
// is the argmax), token_ids, token_logprobs (null for the first token), num_context_tokens.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/error.h"
#include "eval/kv_eval.h"

namespace pagoda::cli {
namespace {

struct LoglikelihoodFlags {
  ModelFlags model;
  std::string data;
  bool json = false;
};

struct Example {
  std::vector<int32_t> ids;
  int64_t num_context = 1;  // scored tokens: [num_context, ids.size())
};

Example FromPair(const Tokenizer& tok, std::string context, std::string continuation) {
  EncodeOptions o;
  o.add_special_tokens = false;
  o.parse_special = true;
  Example e;
  if (context.empty()) {
    const int32_t prefix =
        tok.bos_id() >= 0 ? tok.bos_id() : (tok.eos_ids().empty() ? -1 : tok.eos_ids()[0]);
    PAGODA_ENSURE(prefix >= 0, ErrorCode::kInvalidArgument,
                  "an empty context needs a BOS or EOS token");
    e.ids = {prefix};
    const std::vector<int32_t> cont = tok.Encode(continuation, o);
    e.ids.insert(e.ids.end(), cont.begin(), cont.end());
    return e;
  }
  const size_t kept = context.find_last_not_of(" \t\n\r\f\v");
  const size_t trimmed = kept == std::string::npos ? 0 : kept + 1;
  continuation = context.substr(trimmed) + continuation;
  context.resize(trimmed);
  e.ids = tok.Encode(context + continuation, o);
  e.num_context = static_cast<int64_t>(tok.Encode(context, o).size());
  return e;
}

int RunLoglikelihood(const LoglikelihoodFlags& f) {
  auto model = f.model.LoadModel();
  auto tokenizer = f.model.LoadTokenizer(*model);
  const KVCacheDType model_default =
      model->spec().weight_dtype == DType::kF32 ? KVCacheDType::kF32 : KVCacheDType::kBF16;
  KVCacheChoice choice;
  choice.dtype = ParseKVCacheDType(f.model.kv_cache_dtype, model_default);
  choice.quant = f.model.KVQuant();
  std::ifstream in(f.data);
  PAGODA_ENSURE(in.good(), ErrorCode::kNotFound, "--data: cannot open " << f.data);
  const int64_t vocab = model->spec().vocab_size;
  nlohmann::json results = nlohmann::json::array();
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    PAGODA_ENSURE(j.is_object(), ErrorCode::kInvalidArgument,
                  f.data << ":" << line_no << ": not a JSON object");
    Example e;
    if (j.contains("prompt_ids")) {
      PAGODA_ENSURE(j["prompt_ids"].is_array(), ErrorCode::kInvalidArgument,
                    f.data << ":" << line_no << ": prompt_ids must be a list of token ids");
      e.ids = j["prompt_ids"].get<std::vector<int32_t>>();
    } else {
      PAGODA_ENSURE(j.contains("context") && j["context"].is_string() &&
                        j.contains("continuation") && j["continuation"].is_string(),
                    ErrorCode::kInvalidArgument,
                    f.data << ":" << line_no
                           << ": needs \"prompt_ids\" or \"context\" and \"continuation\" strings");
      PAGODA_ENSURE(tokenizer != nullptr, ErrorCode::kInvalidArgument,
                    f.model.model << " has no tokenizer; pass --tokenizer PATH");
      e = FromPair(*tokenizer, j["context"], j["continuation"]);
    }
    PAGODA_ENSURE(e.ids.size() >= 2, ErrorCode::kInvalidArgument,
                  f.data << ":" << line_no << ": fewer than 2 tokens");
    for (int32_t id : e.ids) {
      PAGODA_ENSURE(
          id >= 0 && id < vocab, ErrorCode::kInvalidArgument,
          f.data << ":" << line_no << ": token id " << id << " is outside the vocabulary");
    }
    const std::vector<float> logits = SequenceLogits(*model, e.ids, choice);
    nlohmann::json token_logprobs = nlohmann::json::array({nullptr});
    double sum = 0.0;
    bool greedy = true;
    for (size_t p = 0; p + 1 < e.ids.size(); ++p) {
      const float* row = logits.data() + p * vocab;
      double m = -INFINITY;
      int32_t argmax = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        if (row[v] > m) m = row[v], argmax = static_cast<int32_t>(v);
      }
      double z = 0.0;
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - m);
      const int32_t target = e.ids[p + 1];
      const double lp = static_cast<double>(row[target]) - m - std::log(z);
      token_logprobs.push_back(lp);
      if (static_cast<int64_t>(p) + 1 >= e.num_context) {
        sum += lp;
        greedy = greedy && argmax == target;
      }
    }
    results.push_back({{"loglikelihood", sum},
                       {"is_greedy", greedy},
                       {"num_context_tokens", e.num_context},
                       {"token_ids", e.ids},
                       {"token_logprobs", token_logprobs}});
  }
  if (f.json) {
    std::printf("%s\n", nlohmann::json{{"results", results}}.dump().c_str());
  } else {
    for (const auto& r : results) {
      std::printf("%.6f %s\n", r["loglikelihood"].get<double>(),
                  r["is_greedy"].get<bool>() ? "greedy" : "-");
    }
  }
  return 0;
}

}  // namespace

void AddEvalLoglikelihoodCommand(CLI::App& root, Action* action) {
  CLI::App* eval = root.get_subcommand("eval");
  auto f = std::make_shared<LoglikelihoodFlags>();
  CLI::App* app = eval->add_subcommand(
      "loglikelihood",
      "log-probability of continuations (lm-evaluation-harness's requests) or of token ids");
  f->model.Add(app);
  app->add_option("--data", f->data,
                  "JSONL: {\"context\", \"continuation\"} or {\"prompt_ids\"} per line")
      ->required();
  app->add_flag("--json", f->json, "print one JSON object");
  app->callback([f, action] { *action = [f] { return RunLoglikelihood(*f); }; });
}

}  // namespace pagoda::cli
