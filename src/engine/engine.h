// Engine: the step loop of continuous batching (nano-vllm's LLMEngine):
//   Step() = Scheduler::Schedule -> ModelRunner::Execute -> sample and post-process
// (append tokens, stop checks, n > 1 forks, finished requests release their blocks).
//
// Synchronous and single-threaded: AddRequest/Abort/Step from one thread. The server
// wraps it in AsyncEngine, which owns that thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/kv_cache.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct EngineConfig {
  SchedulerConfig scheduler;
  KVCacheConfig kv;  // from ComputeKVCacheConfig: blocks, block size, dtype
  KVQuantOptions kv_quant;  // quantized formats: group size, skip layers, sink/recent tokens
  bool enable_prefix_caching = true;
  PrefixHashAlgo prefix_hash_algo = PrefixHashAlgo::kSha256;
  // Decode steps padded to these batch sizes (ascending; engine/decode_padding.h, the CLI's
  // --cuda-graph-sizes), with rows that use one spare KV block beyond kv.num_blocks; a backend
  // with decode-step graphs (Backend::DecodeGraphContexts) captures them for every size at
  // start-up. Sizes above the scheduler's max_num_seqs or max_num_batched_tokens are dropped.
  // Empty: steps run at their own batch size.
  std::vector<int64_t> decode_batch_sizes;
};

// What one step produced for one request.
struct RequestOutput {
  int64_t request_id = 0;
  std::vector<int32_t> new_token_ids;
  std::string new_text;                     // empty without a tokenizer
  std::vector<TokenLogprobs> new_logprobs;  // when requested
  // spec.prompt_logprobs >= 0, in the request's first output only: one entry per prompt
  // token after the first (the first has no context to be predicted from).
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_cached_tokens = 0;
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t prompt_tokens = 0;      // prompt tokens of admitted requests
  int64_t generation_tokens = 0;  // tokens generated
  double kv_usage = 0.0;          // blocks in use / all blocks
  PrefixCacheStats prefix_cache;
  int64_t steps = 0;
};

class Engine {
 public:
  // `tokenizer` may be null (ids only: no stop strings, no text). Both must outlive it.
  Engine(Model& model, const Tokenizer* tokenizer, const EngineConfig& config);

  const EngineConfig& config() const { return config_; }
  const Model& model() const { return model_; }

  // Validates and queues a request; returns its id (for n > 1, the group's first id;
  // the other samples get the following ids). Throws InvalidArgument naming the field.
  int64_t AddRequest(RequestSpec spec);
  // Finishes a request (and its group) with FinishReason::kAbort; frees its blocks.
  void Abort(int64_t request_id);

  // One step. Returns the outputs of every request that progressed or finished.
  std::vector<RequestOutput> Step();
  bool HasUnfinished() const { return !requests_.empty(); }
  EngineStats Stats() const;

 private:
  // A token for every request of the step that samples, all rows in one Backend::Sample call
  // (the logits may stay in device memory); a request that forks (n > 1) first hands its row to
  // its children, whose outputs come before its own.
  void SampleStep(ModelRunner::StepResult& step, std::vector<RequestOutput>* outs);
  // One request's token from its row [1, vocab] (a forked child).
  void PostProcess(Request& r, const TensorView& row, std::vector<RequestOutput>* outs);
  SampleRow RowFor(Request& r, TokenLogprobs* logprobs) const;
  // The chosen token into the request and its output.
  void Emit(Request& r, int32_t id, const TokenLogprobs* lp, std::vector<RequestOutput>* outs);
  void StorePromptLogprobs(const ModelRunner::StepResult& step);
  void ForkSamples(Request& parent, const TensorView& row, std::vector<RequestOutput>* outs);
  void AppendToken(Request& r, int32_t id, const TokenLogprobs* lp, RequestOutput& out);
  void Finish(Request& r, FinishReason reason, RequestOutput& out);
  // Start-up: one padded decode step per (batch size, graph context) twice, so that a graphing
  // backend has captured every decode graph before the first request.
  void WarmUpDecodeGraphs();

  Model& model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  KVCacheManager kv_;
  std::unique_ptr<KVCache> cache_;  // made by the model's backend
  Scheduler scheduler_;
  ModelRunner runner_;
  std::vector<int32_t> eos_ids_;
  std::map<int64_t, std::unique_ptr<Request>> requests_;
  int64_t next_id_ = 1;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t steps_ = 0;
};

// KVCacheDType -> the element type of the CPU cache (f32, bf16, f16); quantized formats map
// to bf16, the width of their skipped layers and side pool (ApplyKVCacheFormat adds the rest).
DType KVStorageDType(KVCacheDType t);

}  // namespace pagoda
