// ModelRunner: turns a SchedulerOutput into one ForwardBatch, performs the step's
// copy-on-write block copies, runs the model and hands back one row of logits for each
// request whose tokens are all computed after this step (the ones that sample).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "model/kv_storage.h"
#include "model/model.h"

namespace pagoda {

class ModelRunner {
 public:
  ModelRunner(Model& model, KVStorage& cache, const KVCacheManager& kv);

  struct StepResult {
    std::vector<Request*> sampled;  // requests that get a new token, in batch order
    std::vector<float> logits;      // [sampled.size(), vocab]
  };
  StepResult Execute(const SchedulerOutput& out);

 private:
  Model& model_;
  KVStorage& cache_;
  const KVCacheManager& kv_;
  ForwardBatch batch_;  // reused across steps
};

}  // namespace pagoda
