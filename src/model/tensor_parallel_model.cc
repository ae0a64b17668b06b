#include "model/tensor_parallel_model.h"

#include <utility>

#include "core/error.h"
#include "core/logging.h"

namespace pagoda {

std::unique_ptr<TensorParallelModel> TensorParallelModel::OnCpu(std::unique_ptr<Model> full, int size) {
  PAGODA_ENSURE(size >= 1, ErrorCode::kInvalidArgument, "--tensor-parallel-size must be at least 1 (got " << size << ")");
  return Make(std::move(full), std::make_unique<LocalGroup>(size), [](int) { return NewCpuBackend(); });
}

std::unique_ptr<TensorParallelModel> TensorParallelModel::Make(std::unique_ptr<Model> full,
                                                               std::unique_ptr<CommunicatorGroup> group,
                                                               const BackendFactory& make_backend) {
  auto m = std::unique_ptr<TensorParallelModel>(new TensorParallelModel(std::move(full), std::move(group), make_backend));
  m->Prepare(*m->tp_backend_);
  return m;
}

TensorParallelModel::TensorParallelModel(std::unique_ptr<Model> full, std::unique_ptr<CommunicatorGroup> group,
                                         const BackendFactory& make_backend)
    : full_(std::move(full)), group_(std::move(group)), logits_(group_->size()), errors_(group_->size()) {
  const int size = group_->size();
  std::vector<Backend*> ranks;
  for (int r = 0; r < size; ++r) {
    backends_.push_back(make_backend(r));
    backends_[r]->SetCommunicator(&group_->rank(r));
    shards_.push_back(full_->Shard(r, size, *backends_[r]));
    ranks.push_back(backends_[r].get());
  }
  tp_backend_ = std::make_unique<TensorParallelBackend>(std::move(ranks));
  for (int r = 1; r < size; ++r) workers_.emplace_back([this, r] { WorkerLoop(r); });
  PAGODA_LOG(kInfo) << spec().name << ": tensor parallel over " << size << " " << backends_[0]->name() << " ranks, "
                    << shards_[0]->spec().num_heads << " query / " << shards_[0]->spec().num_kv_heads
                    << " KV heads and an MLP width of " << shards_[0]->spec().ffn_dim << " each";
}

TensorParallelModel::~TensorParallelModel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void TensorParallelModel::WorkerLoop(int rank) {
  int64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors_[rank] = error;
      --pending_;
    }
    cv_.notify_all();
  }
}

void TensorParallelModel::OnEveryRank(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_ = size() - 1;
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  for (const auto& e : errors_) {
    if (e) std::rethrow_exception(e);
  }
}

int64_t TensorParallelModel::KVCopies() const {
  const KVShape s = spec().kv_shape();
  if (s.mla) return size();  // the latent cache on every rank
  return s.num_kv_heads < size() ? size() / s.num_kv_heads : 1;
}

void TensorParallelModel::ReserveWorkspace(int64_t max_tokens, int64_t max_logits) {
  for (auto& s : shards_) s->ReserveWorkspace(max_tokens, max_logits);
}

void TensorParallelModel::Forward(const StepDescription& step, Backend& backend, KVCache& cache,
                                  const TensorView& logits, const ForwardObserver* observer) {
  CheckBackend(backend);
  auto* composite = dynamic_cast<TensorParallelKVCache*>(&cache);
  PAGODA_CHECK(composite != nullptr) << "TensorParallelModel::Forward: the KV cache was not made by its backend";
  const int64_t rows = step.num_logits(), vocab = spec().vocab_size;
  for (int r = 1; r < size(); ++r) logits_[r].resize(static_cast<size_t>(rows * vocab));
  OnEveryRank([&](int r) {
    const TensorView out = r == 0 ? logits : TensorView::F32(logits_[r].data(), rows, vocab);
    shards_[r]->Forward(step, *backends_[r], composite->rank(r), out, r == 0 ? observer : nullptr);
  });
}

}  // namespace pagoda
