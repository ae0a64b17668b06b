// ModelRunner: turns a SchedulerOutput into one StepDescription (backend/step_description.h),
// performs the step's copy-on-write block copies on the backend, runs the model and hands back one row of logits for each
// request whose tokens are all computed after this step (the ones that sample).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kv_cache.h"
#include "backend/step_description.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace pagoda {

class ModelRunner {
 public:
  // `cache` made by the model's backend. decode_batch_sizes (ascending, engine/decode_padding.h):
  // decode steps are padded to these sizes with rows that use block `padding_block` of `cache`
  // (one past the manager's blocks); empty: no padding.
  ModelRunner(Model& model, KVCache& cache, const KVCacheManager& kv, std::vector<int64_t> decode_batch_sizes = {},
              int32_t padding_block = -1);

  struct StepResult {
    std::vector<Request*> sampled;  // requests that get a new token, in batch order
    std::vector<float> logits;      // [sampled.size(), vocab] in host memory, or empty and:
    TensorView device_logits;       // the same rows in the backend's LogitsBuffer
    // The sampled rows wherever they are.
    TensorView Logits(int64_t vocab) {
      return device_logits.data != nullptr
                 ? device_logits
                 : TensorView::F32(logits.data(), static_cast<int64_t>(sampled.size()), vocab);
    }
    // Requests with spec.want_prompt_logits: the logits at the prompt positions computed in
    // this step that predict a prompt token (position p < num_prompt_tokens - 1; row i of a
    // PromptRows is the logits at position first_position + i, i.e. the distribution of the
    // prompt token at first_position + i + 1). The last prompt position's logits are the
    // sampled row in `logits`. In batch order, rows in prompt_logits one after the other.
    struct PromptRows {
      Request* request = nullptr;
      int64_t first_position = 0;
      int64_t count = 0;
    };
    std::vector<PromptRows> prompt_rows;
    std::vector<float> prompt_logits;  // [sum of prompt_rows' count, vocab]
  };
  StepResult Execute(const SchedulerOutput& out);
  // A decode step of `batch` padding rows only (the start-up warm-up that makes a graphing
  // backend capture its decode graphs): one token at position `context` - 1, the others at 0,
  // so the step attends to at most `context` keys at the cost of one long row. REQUIRES:
  // padding configured.
  void RunPaddingStep(int64_t batch, int64_t context);

 private:
  // Adds n padding sequences (token 0 at position `context` - 1, every block the padding block)
  // and asks for their logits.
  void AddPaddingRows(int64_t n, int64_t context);
  // Runs `step` with its first `num_sampled` logits rows kept (the rest are padding rows).
  void Forward(const StepDescription& step, int64_t num_sampled, StepResult* result);

  Model& model_;
  KVCache& cache_;
  const KVCacheManager& kv_;
  std::vector<int64_t> decode_batch_sizes_;
  int32_t padding_block_ = -1;
  StepBuilder builder_;            // reused across steps
  std::vector<int32_t> prompt_rows_;  // step indices of prompt-logit tokens, reused
  std::vector<int32_t> padding_tokens_, padding_table_;
  std::vector<float> padding_logits_;  // host logits rows when the backend has no LogitsBuffer
};

}  // namespace pagoda
