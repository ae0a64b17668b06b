// CpuBackend: the Backend on this machine's CPU, over the kernels in kernels/cpu (run-time
// dispatched AVX-512 / AVX2 / portable; threads from core/parallel.h). Weights are repacked
// into row panels at preparation when the MatMul level has a packed kernel (PAGODA_PACK_WEIGHTS
// =0 keeps them row-major); the KV cache is a KVStorage (backend/kv_storage.h). The step plan
// holds each token's block-table row, the RoPE cos/sin of the step's positions per RoPE
// configuration and the attention work partition per head layout, each computed once per step
// and reused by every layer; its vectors keep their capacity, so a warmed-up step allocates
// nothing here. Thread-compatible: one step at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"

namespace pagoda {

class KVStorage;

class CpuBackend : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string_view name() const override { return "cpu"; }

  Weight PrepareWeight(const WeightMatrix& w, WeightLayout layout) override;
  Weight PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) override;
  void PrepareMoe(MoeLayer* layer) override;
  PreparedVector PrepareVector(std::span<const float> v) override;
  void LogPrepared(std::string_view model_name) override;

  std::shared_ptr<float> Allocate(int64_t floats) override;
  std::unique_ptr<KVCache> CreateKVCache(const KVStorageShape& shape) override;
  void CopyBlock(KVCache& cache, int32_t src, int32_t dst) override;

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

  // How many times the step plan had to be made afresh (tests: once per step).
  int64_t num_plans() const { return num_plans_; }

 private:
  const StepDescription& step() const;
  const RopeTable& RopeTableFor(const RopeParams& rope);

  // Preparation statistics since the last LogPrepared.
  int64_t packed_count_ = 0, stacked_count_ = 0, packed_bytes_ = 0;
  double pack_seconds_ = 0.0;

  // The step plan.
  const StepDescription* step_ = nullptr;
  int64_t step_serial_ = 0;
  std::vector<const int32_t*> token_tables_;  // [num_tokens] the token's block-table row
  // Keyed by the RoPE configuration's values (its frequencies and magnitude), not its
  // address: two configurations never share a table, whoever owns them.
  struct RopeEntry {
    std::vector<double> inv_freq;
    double magnitude = 0.0;
    int64_t serial = -1;
    RopeTable table;
  };
  std::vector<RopeEntry> rope_tables_;
  struct PlanEntry {
    int64_t serial = -1;
    PagedAttentionPlan plan;
  };
  std::vector<PlanEntry> attention_plans_;
  int64_t num_plans_ = 0;
};

}  // namespace pagoda
