// CudaBackend: the Backend on one NVIDIA GPU (kernels in kernels/cuda, GEMMs through cuBLAS).
// Built only with -DPAGODA_CUDA=ON; this header needs no CUDA headers, so host code (the
// CLI, tests) can include it.
//
// What it is today (docs/cuda.md): the first correct backend, not yet the fast one.
//   - Weights are uploaded once at preparation, widened to f32 on the device (bf16/f16 values
//     exactly; Q8_0/Q4_0/K-quants dequantized to bf16 first, and logged so); MatMul is an
//     FP32 cuBLAS GEMM without TF32. No stacked q|k|v / gate|up form (PrepareStacked returns
//     an empty Weight, so the model runs the parts one by one).
//   - Activations are f32 device buffers (Allocate); the KV cache is per-layer device arrays
//     of f32, bf16 or f16 blocks [num_blocks, block_size, num_kv_heads, head_dim]. Quantized
//     KV formats and the mixed-precision policies (skip layers, sink/recent/heavy tokens) are
//     refused by name at CreateKVCache.
//   - BeginStep uploads the step description (synchronously); MoE routing runs on the host
//     after copying the router logits back; a MatMul whose output view is host memory (the
//     logits the engine hands in) computes into device scratch and copies back.
//   - Sampling and logprobs run on the host (the CPU backend's sampler).
//   - Not yet: batch invariance on the GEMM path, CUDA graphs, device sampling, pinned
//     uploads, the tensor-core attention kernels.
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
  void PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                      const TensorView& out) override;
  void MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                    const TensorView& out) override;
  void Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) override;
  void CopyToHost(const TensorView& src, float* dst) override;
  // Tensor parallelism across GPUs: the communicator's device all-reduce (an NcclGroup's
  // ncclAllReduce) on this backend's stream, so a captured decode step includes it.
  void AllReduce(const TensorView& x) override;
  // Sampling runs on the host for now, through the CPU backend's sampler (the engine hands in
  // host logits; device rows are copied back first). Sampling on the device is not written yet.
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
  // Benchmarks: seconds per op kind (MatMul, PagedAttention, ...) since EnableOpTimes(true),
  // each op synchronized before and after (so only meaningful with step graphs off).
  void EnableOpTimes(bool on);
  std::vector<std::pair<std::string, double>> OpTimes() const;

  struct State;  // device buffers of the current step, the cuBLAS handle, scratch

 private:
  std::unique_ptr<State> s_;
};

// The process's CUDA backend on device 0, made on first use. Throws Unsupported when there is
// no CUDA device.
CudaBackend& DefaultCudaBackend();

}  // namespace pagoda
