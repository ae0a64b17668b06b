// pagoda generate: one request from a prompt to completion, streamed to stdout.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/generator.h"

namespace pagoda::cli {
namespace {

struct GenerateFlags {
  ModelFlags model;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 256;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  std::optional<uint64_t> seed;
  int64_t logprobs = -1;
  bool ignore_eos = false;
  bool json = false;
};

int RunGenerate(const GenerateFlags& f) {
  auto model = f.model.LoadModel();
  auto tokenizer = f.model.LoadTokenizer(*model);
  GenerateRequest req;
  if (!f.prompt_ids.empty()) {
    req.prompt = ParseIdList(f.prompt_ids, "--prompt-ids");
  } else if (!f.prompt.empty()) {
    PAGODA_ENSURE(tokenizer != nullptr, ErrorCode::kInvalidArgument,
                  f.model.model << " has no tokenizer: use --prompt-ids (or --tokenizer)");
    req.prompt = tokenizer->Encode(f.prompt, EncodeOptions{});
  }
  if (req.prompt.empty()) {
    const int32_t bos = tokenizer ? tokenizer->bos_id() : 1;
    PAGODA_ENSURE(bos >= 0, ErrorCode::kInvalidArgument, "the tokenizer has no BOS token: give a prompt");
    req.prompt.push_back(bos);
  }
  req.max_tokens = f.max_tokens;
  req.sampling.temperature = f.temperature;
  req.sampling.top_k = f.top_k;
  req.sampling.top_p = f.top_p;
  req.sampling.min_p = f.min_p;
  req.sampling.repetition_penalty = f.repetition_penalty;
  req.sampling.seed = f.seed;
  req.sampling.logprobs = f.logprobs;
  req.ignore_eos = f.ignore_eos;
  req.eos_ids = model->eos_ids();
  if (tokenizer) {
    for (int32_t id : tokenizer->eos_ids()) req.eos_ids.push_back(id);
  }

  GeneratorOptions options;
  options.max_model_len = f.model.max_model_len;
  options.block_size = f.model.block_size;
  const KVCacheDType model_default =
      model->spec().weight_dtype == DType::kF32 ? KVCacheDType::kF32 : KVCacheDType::kBF16;
  options.kv_format = ParseKVCacheDType(f.model.kv_cache_dtype, model_default);
  options.kv_quant = f.model.KVQuant();
  Generator generator(*model, options);

  std::unique_ptr<IncrementalDetokenizer> detok;
  // The prompt is the context of the first pieces: SentencePiece's "▁a" after the prompt
  // prints " a" (the text of prompt + output minus the prompt's).
  if (tokenizer && !f.json) detok = std::make_unique<IncrementalDetokenizer>(*tokenizer, req.prompt);
  auto on_token = [&](int32_t id) {
    if (f.json) return;
    if (detok) {
      std::fputs(detok->Add(id).c_str(), stdout);
    } else {
      std::printf("%d ", id);
    }
    std::fflush(stdout);
  };
  GenerateResult result = generator.Generate(req, on_token);

  if (f.json) {
    nlohmann::json out;
    out["prompt_ids"] = req.prompt;
    out["ids"] = result.output;
    std::string text;
    if (tokenizer) {
      IncrementalDetokenizer whole(*tokenizer, req.prompt);
      for (int32_t id : result.output) text += whole.Add(id);
      text += whole.Flush();
    }
    out["text"] = text;
    out["finish_reason"] = result.finish_reason;
    if (f.logprobs >= 0) {
      nlohmann::json lps = nlohmann::json::array();
      for (const auto& lp : result.logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [id, v] : lp.top) top.push_back({id, v});
        lps.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"top", top}});
      }
      out["logprobs"] = lps;
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    if (detok) std::fputs(detok->Flush().c_str(), stdout);
    std::fputs("\n", stdout);
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& root, Action* action) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* app = root.add_subcommand("generate", "generate text from a prompt");
  flags->model.Add(app);
  auto* p = app->add_option("--prompt", flags->prompt, "prompt text (tokenized with the model's BOS rule)");
  auto* pi = app->add_option("--prompt-ids", flags->prompt_ids, "prompt token ids, used exactly as given: 1,2,3");
  p->excludes(pi);
  app->add_option("--max-tokens", flags->max_tokens, "most tokens to generate")->capture_default_str();
  app->add_option("--temperature", flags->temperature, "0 means greedy")->capture_default_str();
  app->add_option("--top-k", flags->top_k, "keep the k most likely tokens (0: all)");
  app->add_option("--top-p", flags->top_p, "nucleus sampling threshold");
  app->add_option("--min-p", flags->min_p, "drop tokens below min_p x the top probability");
  app->add_option("--repetition-penalty", flags->repetition_penalty, "> 1 discourages repeats");
  app->add_option("--seed", flags->seed, "sampling seed");
  app->add_option("--logprobs", flags->logprobs, "report the top K logprobs per generated token");
  app->add_flag("--ignore-eos", flags->ignore_eos, "keep generating past EOS");
  app->add_flag("--json", flags->json, "print one JSON object on stdout");
  app->callback([flags, action] { *action = [flags] { return RunGenerate(*flags); }; });
}

}  // namespace pagoda::cli
