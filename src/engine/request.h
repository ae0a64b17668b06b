// Request: one generation request's state as the engine sees it (vLLM V1's Request).
//
// There are no prefill/decode phases: a request has tokens (prompt, then outputs) and
// num_computed_tokens, the prefix whose K/V are in its blocks. Each step schedules some
// of the remaining tokens; when num_computed_tokens reaches num_tokens(), the step's
// logits give the next token. Preemption frees the blocks and sets num_computed_tokens
// to 0: the request is recomputed later (outputs kept, so it continues where it was).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/stop_checker.h"
#include "kernels/params/sampling_params.h"

namespace pagoda {

enum class RequestStatus { kWaiting, kRunning, kFinished };

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "abort"

using Clock = std::chrono::steady_clock;

// What a client asks for (after tokenization and validation).
struct RequestSpec {
  std::vector<int32_t> prompt;  // REQUIRES: not empty
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;          // EOS and stop strings are ignored before this many
  bool ignore_eos = false;
  std::vector<std::string> stop;   // stop strings (never emitted)
  std::vector<int32_t> stop_token_ids;
  std::string cache_salt;          // extra prefix-hash key: tenants do not share blocks
  int64_t n = 1;                   // samples; they share the prompt's blocks (Fork)
  // The logits at every prompt position are handed back (ModelRunner::StepResult::prompt_*)
  // from the same forward pass as the prefill, for prompt logprobs (echo, prompt_logprobs).
  // Such a request takes no prefix-cache hit: every prompt position is computed.
  bool want_prompt_logits = false;
  // >= 0: the logprob of every prompt token but the first, with the top k at each
  // position (RequestOutput::prompt_logprobs); sets want_prompt_logits. -1: none.
  int64_t prompt_logprobs = -1;
  // Drop special tokens (BOS/EOS, added control tokens) from the text; false keeps the
  // markers tool-call parsers look for ([TOOL_CALLS], <|python_tag|> ...).
  bool skip_special_tokens = true;
};

struct Request {
  int64_t id = 0;
  int64_t group_id = 0;    // the id of the first sample of an n > 1 group
  int64_t sample_index = 0;
  RequestSpec spec;
  std::vector<int32_t> tokens;  // prompt + output
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache (first admission)
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t num_preemptions = 0;
  std::unique_ptr<SamplerState> sampler;  // made by the model's backend
  std::unique_ptr<StopChecker> stop_checker;  // nullptr without a tokenizer
  std::vector<TokenLogprobs> logprobs;
  // spec.prompt_logprobs >= 0: entry p is prompt token p + 1 given tokens [0, p], filled
  // as the prefill's chunks are computed; handed out with the first output.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  Clock::time_point arrival_time;
  Clock::time_point first_token_time;
  bool has_first_token = false;
  bool forked = false;  // n > 1: the children have been created

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace pagoda
