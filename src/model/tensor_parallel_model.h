// TensorParallelModel: one model sharded over `size` ranks of this process (Megatron style,
// Model::Shard), each rank a thread with its own CPU backend, the ranks joined by a LocalGroup
// (sums in rank order, the same bits on every rank). To the engine it is one model: backend()
// is a TensorParallelBackend whose KV caches hold every rank's heads under the same block ids,
// and Forward runs the step on every rank at once (the scheduler, the block tables and
// sampling stay in the caller, as rank 0). Every rank computes the same logits; rank 0's are
// returned. `pagoda ... --tensor-parallel-size N` on the CPU makes one.
//
// Across GPUs the same shards need an NCCL communicator (not written yet: the CUDA backend
// refuses AllReduce over several ranks).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/tensor_parallel_backend.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace pagoda {

class TensorParallelModel : public Model {
 public:
  // Shards `full` (loaded and prepared on the CPU) over `size` CPU ranks. Throws Unsupported
  // when the architecture or the head counts do not allow it (Model::Shard).
  static std::unique_ptr<TensorParallelModel> OnCpu(std::unique_ptr<Model> full, int size);
  // The general form: group->size() ranks, rank r's backend from make_backend(r) (e.g. the
  // CUDA backend on GPU r with an NcclGroup).
  using BackendFactory = std::function<std::unique_ptr<Backend>(int rank)>;
  static std::unique_ptr<TensorParallelModel> Make(std::unique_ptr<Model> full, std::unique_ptr<CommunicatorGroup> group,
                                                   const BackendFactory& make_backend);
  ~TensorParallelModel() override;

  int size() const { return static_cast<int>(shards_.size()); }
  const Model& shard(int r) const { return *shards_[r]; }

  const ModelSpec& spec() const override { return full_->spec(); }
  KVStorageShape KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const override {
    return full_->KVShapeFor(num_blocks, block_size, dtype);
  }
  void ReserveWorkspace(int64_t max_tokens, int64_t max_logits) override;
  void Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
               const ForwardObserver* observer) override;
  int64_t WeightBytesPerToken() const override { return full_->WeightBytesPerToken(); }
  int64_t KVCopies() const override;
  std::vector<int32_t> eos_ids() const override { return full_->eos_ids(); }

 protected:
  void PrepareWeights(Backend&) override {}

 private:
  TensorParallelModel(std::unique_ptr<Model> full, std::unique_ptr<CommunicatorGroup> group,
                      const BackendFactory& make_backend);
  // Runs fn(rank) for every rank at once (rank 0 on the calling thread); rethrows the first
  // rank's exception.
  void OnEveryRank(const std::function<void(int)>& fn);
  void WorkerLoop(int rank);

  std::unique_ptr<Model> full_;
  std::unique_ptr<CommunicatorGroup> group_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Model>> shards_;
  std::unique_ptr<TensorParallelBackend> tp_backend_;
  std::vector<std::vector<float>> logits_;  // ranks > 0: their (identical) logits

  // Workers for ranks 1..size-1.
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> workers_;
};

}  // namespace pagoda
