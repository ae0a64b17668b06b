#include "model/model.h"

#include "core/error.h"

namespace pagoda {

void Model::Prepare(Backend& backend) {
  PAGODA_CHECK(backend_ == nullptr) << "Model::Prepare called twice";
  backend_ = &backend;
  PrepareWeights(backend);
  backend.LogPrepared(spec().name);
}

Backend& Model::backend() const {
  PAGODA_CHECK(backend_ != nullptr) << "the model was not prepared on a backend (Model::Prepare)";
  return *backend_;
}

std::unique_ptr<Model> Model::Shard(int, int, Backend&) const {
  ThrowUnsupported("tensor parallelism: " + spec().name + " (" + spec().architecture +
                   ") has no sharded form for tensor parallelism");
}

void Model::CheckBackend(const Backend& backend) const {
  PAGODA_CHECK(&backend == backend_) << "Forward on a backend other than the one the weights were prepared on";
}

void ForwardSequence(Model& model, KVCache& cache, StepBuilder& builder, std::span<const int32_t> tokens,
                     int64_t first, int64_t count, std::span<const int32_t> blocks, LogitRows rows, float* logits,
                     const ForwardObserver* observer) {
  builder.Reset(cache.shape().block_size);
  const int64_t index = builder.AddSequence(tokens, first, count, blocks);
  if (rows == LogitRows::kLast) builder.AddLogits(index + count - 1);
  if (rows == LogitRows::kAll) {
    for (int64_t i = 0; i < count; ++i) builder.AddLogits(index + i);
  }
  const StepDescription& step = builder.Finish();
  Backend& backend = model.backend();
  model.Forward(step, backend, cache,
                TensorView::F32(logits, step.num_logits(), model.spec().vocab_size, backend.device()), observer);
}

}  // namespace pagoda
