// CudaBackend: the Backend on one NVIDIA GPU (kernels in kernels/cuda, GEMMs through cuBLAS).
// Built only with -DPAGODA_CUDA=ON; this header needs no CUDA headers, so host code (the
// CLI, tests) can include it.
//
// What it does (docs/cuda.md):
//   - Weights are uploaded once at preparation: bf16/f16 as bf16 for the tensor-core GEMMs
//     (kernels/cuda/gemm.h: mma.sync up to 64 rows, wgmma beyond, a fixed split-k so every
//     row count gives the same bits), f32 models in f32 without TF32; Q8_0/Q4_0/K-quants are
//     dequantized to bf16 first, and logged so.
//   - Activations are f32 device buffers (Allocate). The KV cache is per-layer device arrays
//     of blocks (backend/cuda_kv_cache.cuh): f32/bf16/f16 rows, or fp8_e4m3/fp8_e5m2/int8 rows
//     in the CPU's byte layout (skip-layers and checkpoint scales included); int4, nvfp4,
//     kivi2 and the side-pool policies are refused by name at CreateKVCache.
//   - Attention: the tensor-core FlashAttention kernels for bf16/f16 caches, SIMT kernels for
//     f32 and quantized caches and other shapes; MLA over the latent cache; MoE routed on
//     the host.
//   - BeginStep uploads the step description; decode steps run as CUDA graphs
//     (cuda_step_graphs.cuh) unless EnableStepGraphs(false) (--enforce-eager).
//   - Greedy rows are sampled on the device (only ids come back); other rows and logprobs go
//     through the CPU sampler on copied rows.
// Thread-compatible: one step at a time; everything runs on one stream. Each entry point that
// allocates or launches selects this backend's GPU on the calling thread first, so several
// backends (one per GPU, tensor parallelism) can be driven from their own threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace pagoda {

class CudaBackend : public Backend {
 public:
  // Selects device `device` and creates the cuBLAS handle. Throws Unsupported ("no CUDA
  // device ...") when none is usable.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string_view name() const override { return "cuda"; }

  Weight PrepareWeight(const WeightMatrix& w, WeightLayout layout = WeightLayout::kFastest) override;
  Weight PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) override;
  void PrepareMoe(MoeLayer* layer) override;
  PreparedVector PrepareVector(std::span<const float> v) override;
  void LogPrepared(std::string_view model_name) override;

  std::shared_ptr<float> Allocate(int64_t floats) override;
  std::unique_ptr<KVCache> CreateKVCache(const KVStorageShape& shape) override;
  void CopyBlock(KVCache& cache, int32_t src, int32_t dst) override;
  void EnableStepGraphs(bool on) override;
  // With graphs on: 1 and the first context of each deeper attention split (FlashSplitDepth),
  // unless the cache's model waits on the host mid-step (MoE).
  std::vector<int64_t> DecodeGraphContexts(int64_t max_len, const KVCache& cache) const override;
  void ReserveScratch(int64_t max_tokens, int64_t max_logits) override;
  MemoryInfo DeviceMemory() const override;

  void BeginStep(const StepDescription& step, KVCache& cache) override;
  void Embedding(const Weight& table, const TensorView& out) override;
  void MatMul(const Weight& w, const TensorView& x, const TensorView& y, const Epilogue& ep = {}) override;
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
  // One kernel (kernels/cuda/attention_inputs.h): the separate ops' bits.
  void WriteAttentionInputs(KVCache& cache, int64_t layer, const AttentionInputs& in) override;
  void PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                      const TensorView& out) override;
  void MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                    const TensorView& out) override;
  void Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) override;
  void CopyToHost(const TensorView& src, float* dst) override;
  // Tensor parallelism across GPUs: the communicator's device all-reduce (an NcclGroup's
  // ncclAllReduce) on this backend's stream, so a captured decode step includes it.
  void AllReduce(const TensorView& x) override;
  // Logits rows in device memory (the step's staging buffer): greedy rows are chosen there
  // (only their ids come back); other rows are copied to the host for the CPU sampler.
  TensorView LogitsBuffer(int64_t rows, int64_t vocab) override;
  std::unique_ptr<SamplerState> CreateSampler(const SamplingParams& params) override;
  void Sample(const TensorView& logits, std::span<SampleRow> rows) override;
  void Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                std::span<TokenLogprobs> out) override;

  // Tests and tools: host rows [dst.rows, dst.cols] (contiguous) into the device view dst;
  // fill a device view with a value (poisoning outputs); wait for the device.
  void Upload(const float* src, const TensorView& dst);
  void Fill(const TensorView& dst, float value);
  void Synchronize();
  // The device's name and memory (for logs and gpu-check's table).
  std::string DeviceSummary() const;
  // Decode-step graphs captured so far (one per batch size seen twice).
  int64_t num_step_graphs() const;
  // Tests: the bytes of block `block` of layer `layer`'s K (value false) or V array.
  std::vector<uint8_t> ReadKVBlock(KVCache& cache, int64_t layer, bool value, int32_t block);
  // Benchmarks: seconds per op kind (MatMul, PagedAttention, ...) since EnableOpTimes(true),
  // each op synchronized before and after (so only meaningful with step graphs off).
  void EnableOpTimes(bool on);
  std::vector<std::pair<std::string, double>> OpTimes() const;
  // Benchmarks: marks the work a profiler started with --profile-from-start off records (Nsight
  // Compute's `ncu`, scripts/gpu-check's GPU_CHECK_PROFILE): cudaProfilerStart / Stop.
  void SetProfiling(bool on);

  struct State;  // device buffers of the current step, the cuBLAS handle, scratch

 private:
  std::unique_ptr<State> s_;
};

// The process's CUDA backend on device 0, made on first use. Throws Unsupported when there is
// no CUDA device.
CudaBackend& DefaultCudaBackend();

}  // namespace pagoda
