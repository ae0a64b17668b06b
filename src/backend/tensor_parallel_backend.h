// TensorParallelBackend: the backend a tensor-parallel model (model/tensor_parallel_model.h)
// shows the engine. It owns nothing of the computation: every op of a step runs on the ranks'
// own backends, one per rank, inside the model's Forward. What the engine asks of a backend
// directly is answered here:
//   - CreateKVCache: a TensorParallelKVCache holding each rank's cache (its KV heads) for the
//     same block ids; CopyBlock copies a block on every rank (prefix caching's copy-on-write);
//   - sampling, logprobs, host copies, Allocate: rank 0's backend (every rank holds the same
//     logits, since the LM head is replicated);
//   - EnableStepGraphs: every rank; DeviceMemory: the sum over the ranks' devices.
// The per-layer ops (MatMul, PagedAttention, ...) throw: they belong to the ranks' backends.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace pagoda {

class TensorParallelKVCache : public KVCache {
 public:
  TensorParallelKVCache(const KVStorageShape& shape, std::vector<std::unique_ptr<KVCache>> ranks);
  const KVStorageShape& shape() const override { return shape_; }
  int64_t bytes() const override;
  int64_t side_bytes() const override;
  void SetTensorScales(int64_t layer, float k_scale, float v_scale) override;
  void ReleaseBlocks(std::span<const int32_t> blocks) override;
  KVCache& rank(int r) { return *ranks_[r]; }

 private:
  KVStorageShape shape_;  // the whole model's (all KV heads)
  std::vector<std::unique_ptr<KVCache>> ranks_;
};

class TensorParallelBackend : public Backend {
 public:
  // ranks[r]: rank r's backend (not owned).
  explicit TensorParallelBackend(std::vector<Backend*> ranks);

  Device device() const override { return ranks_[0]->device(); }
  std::string_view name() const override { return ranks_[0]->name(); }
  Backend& rank(int r) const { return *ranks_[r]; }
  int size() const { return static_cast<int>(ranks_.size()); }

  Weight PrepareWeight(const WeightMatrix& w, WeightLayout layout) override;
  Weight PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) override;
  void PrepareMoe(MoeLayer* layer) override;
  PreparedVector PrepareVector(std::span<const float> v) override;
  void LogPrepared(std::string_view model_name) override;

  std::shared_ptr<float> Allocate(int64_t floats) override;
  // `shape` is the whole model's; each rank's cache has shape.num_kv_heads / size heads (one,
  // replicated, when there are fewer KV heads than ranks).
  std::unique_ptr<KVCache> CreateKVCache(const KVStorageShape& shape) override;
  void CopyBlock(KVCache& cache, int32_t src, int32_t dst) override;
  void EnableStepGraphs(bool on) override;
  MemoryInfo DeviceMemory() const override;

  void BeginStep(const StepDescription& step, KVCache& cache) override;
  void Embedding(const Weight& table, const TensorView& out) override;
  void MatMul(const Weight& w, const TensorView& x, const TensorView& y, const Epilogue& ep) override;
  void RmsNorm(const TensorView& x, const TensorView& weight, double eps, const TensorView& y) override;
  void AddBias(const TensorView& bias, const TensorView& x) override;
  void Add(const TensorView& y, const TensorView& x) override;
  void SiluMul(const TensorView& gate, const TensorView& up, const TensorView& out) override;
  void Copy(const TensorView& src, const TensorView& dst) override;
  void GatherLogitRows(const TensorView& x, const TensorView& out) override;
  void Rope(const RopeParams& rope, const TensorView& x, int64_t num_heads, int64_t head_stride,
            int64_t offset) override;
  void WriteKV(KVCache& cache, int64_t layer, const TensorView& k, const TensorView& v) override;
  void ObserveQueries(KVCache& cache, int64_t layer, const TensorView& q, int64_t num_heads, float scale) override;
  void PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                      const TensorView& out) override;
  void MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                    const TensorView& out) override;
  void Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) override;
  void CopyToHost(const TensorView& src, float* dst) override;
  std::unique_ptr<SamplerState> CreateSampler(const SamplingParams& params) override;
  void Sample(const TensorView& logits, std::span<SampleRow> rows) override;
  void Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                std::span<TokenLogprobs> out) override;

 private:
  std::vector<Backend*> ranks_;
};

}  // namespace pagoda
