// Backend: the device seam. Model code (src/model/arch/) describes a model as a sequence of
// the operations below and calls nothing else; each device implements them (CpuBackend wraps
// the kernels in kernels/cpu/, a CUDA backend those in kernels/cuda/), as ggml-backend and
// vLLM's platform layer do.
//
//   Model::Forward(step, backend, cache, logits)
//     backend.BeginStep(step, cache)      upload the step, plan attention once for all layers
//     per layer: RmsNorm, MatMul (+ fused epilogues), Copy, AddBias, Rope, WriteKV,
//                PagedAttention / MlaAttention, SiluMul, Add, MoE
//     backend.GatherLogitRows + MatMul     the logits rows
//
// Ownership: what a backend prepares or allocates (weights, vectors, workspace buffers, KV
// caches) is handed back with shared ownership and lives as long as its holder (the model,
// the engine) keeps it. Weights are
// prepared once at load (PrepareWeight: the CPU packs panels, CUDA uploads), so no device type
// reaches WeightMatrix or the model. Activations are TensorViews of f32 [rows, cols] in memory
// the backend allocated (Allocate), all on device(); ops never allocate once warmed up.
// Thread-compatible: one step at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/kv_cache.h"
#include "backend/step_description.h"
#include "core/tensor_view.h"
#include "kernels/params/matmul_params.h"
#include "kernels/params/rope_params.h"
#include "kernels/params/moe_params.h"
#include "kernels/params/sampling_params.h"
#include "parallel/communicator.h"

namespace pagoda {

// A weight matrix as a backend prepared it: its shape as the model sees it and the backend's
// own form behind `impl`. Empty (rows == 0) for an absent matrix.
struct Weight {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::shared_ptr<const void> impl;  // the backend's form; keeps it alive
  bool empty() const { return rows == 0; }
};

// A small f32 vector prepared on the device, kept alive by `owner`.
struct PreparedVector {
  TensorView view;
  std::shared_ptr<const void> owner;
  bool empty() const { return view.cols == 0; }
};

// How PrepareWeight may lay a matrix out.
enum class WeightLayout {
  kFastest,   // whatever the backend multiplies fastest (CPU: row panels)
  kRowMajor,  // as stored: rows read one by one (embedding tables; paths whose bits were fixed
              // before panels existed)
};

// What becomes of a MatMul's products instead of (or besides) being stored in y.
struct Epilogue {
  enum class Kind { kNone, kAddTo, kSiluMulPairs };
  Kind kind = Kind::kNone;
  TensorView out;  // kAddTo: out += x W^T; kSiluMulPairs: out = silu(gate) * up (see below)
};

// The per-layer constants of a paged attention call.
struct AttentionLayer {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: full attention
};

// One layer's attention inputs (Backend::WriteAttentionInputs): q, k and v rows from src_q,
// src_k, src_v (column ranges of a stacked q|k|v product, or q, k, v themselves), the
// contiguous buffers q, k, v, optional biases, and the layer's RoPE and shape.
struct AttentionInputs {
  TensorView src_q, src_k, src_v;                          // [n, heads * head_dim] f32, any row stride
  TensorView q, k, v;                                      // [n, heads * head_dim] f32, contiguous
  const TensorView* bq = nullptr;                          // [heads * head_dim]; null: no bias
  const TensorView* bk = nullptr;
  const TensorView* bv = nullptr;
  const RopeParams* rope = nullptr;                        // applied to q and k at offset 0
  AttentionLayer layer;                                    // heads, KV heads, head dim, scale
};

// A MoE layer's weights as prepared by the backend (model/arch/moe.h explains the routing).
struct MoeLayer {
  Weight router;                      // [num_experts, dim]
  PreparedVector score_bias;                  // [num_experts] e_score_correction_bias; empty: none
  std::vector<Weight> gate, up, down; // per expert: [ffn, dim], [ffn, dim], [dim, ffn]
  Weight shared_gate, shared_up, shared_down;  // may be empty
  std::shared_ptr<const void> impl;            // the backend's form (PrepareMoe)
};

// A request's sampling state on a backend (its parameters and random generator), made by
// Backend::CreateSampler and handed back with each row it samples.
class SamplerState {
 public:
  virtual ~SamplerState() = default;
};

// One row of Backend::Sample: whose state, the token history its penalties read, where the
// logprobs go (null: not asked for); `token` receives the choice.
struct SampleRow {
  SamplerState* state = nullptr;
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
  TokenLogprobs* logprobs = nullptr;
  int32_t token = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;

  // ---- preparation (load time) ----
  // The weight in `layout`; it reads `w`'s memory (the caller keeps it alive) and may keep
  // its own copy (panels, device memory) in the returned Weight.
  virtual Weight PrepareWeight(const WeightMatrix& w, WeightLayout layout = WeightLayout::kFastest) = 0;
  // Several matrices of one dtype and width stacked along rows as one weight (q|k|v,
  // gate|up), or an empty Weight when this backend has no stacked form for them (the model
  // then runs the parts one by one). kPairs16: rows alternate 16 at a time between the two
  // parts, for Epilogue::kSiluMulPairs.
  virtual Weight PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) = 0;
  // Completes a MoE layer whose Weights were prepared (sets layer->impl).
  virtual void PrepareMoe(MoeLayer* layer) = 0;
  // A small f32 vector (norm weights, biases) on the device.
  virtual PreparedVector PrepareVector(std::span<const float> v) = 0;
  // Logs what preparation did (e.g. how many matrices were packed and their size).
  virtual void LogPrepared(std::string_view model_name) = 0;

  // ---- memory ----
  // A buffer of `floats` f32 values on the device (workspaces), freed with the last copy of
  // the pointer.
  virtual std::shared_ptr<float> Allocate(int64_t floats) = 0;
  // The KV cache bytes for `shape` in this backend's memory (blocks addressed by id). Throws
  // Unsupported when the format or a policy cannot run on this backend.
  virtual std::unique_ptr<KVCache> CreateKVCache(const KVStorageShape& shape) = 0;
  // Copy-on-write block copies, every layer.
  virtual void CopyBlock(KVCache& cache, int32_t src, int32_t dst) = 0;
  // Decode steps (one token per sequence, logits into host memory or LogitsBuffer) replayed as
  // recorded launch graphs, one per batch size (CUDA graphs); off: every op launches eagerly
  // (--enforce-eager). A backend without graphs ignores it. Only callers that end every step
  // with the logits MatMul into host memory or LogitsBuffer (the engine, the generator, the
  // benchmarks) may turn it on.
  virtual void EnableStepGraphs(bool /*on*/) {}
  // The contexts (keys a decode token attends to, up to max_len) whose decode steps over `cache`
  // run as different graphs: the engine's start-up runs a padded decode step at each context
  // and batch size (EngineConfig::decode_batch_sizes) so every graph is captured before the
  // first request. Empty (the default): no decode-step graphs, nothing to warm up.
  virtual std::vector<int64_t> DecodeGraphContexts(int64_t /*max_len*/, const KVCache& /*cache*/) const { return {}; }
  // Scratch for steps of up to `max_tokens` tokens and `max_logits` logits rows, allocated now
  // (models call it from ReserveWorkspace), so a step allocates nothing. No-op by default.
  virtual void ReserveScratch(int64_t /*max_tokens*/, int64_t /*max_logits*/) {}
  // Device memory, in bytes: the total, what this backend has taken since it started
  // (weights, scratch, caches; not other processes' memory), and what was free when it
  // started. All 0 for a backend on host memory (the CPU): the engine then sizes the KV cache
  // from the host's available RAM instead of --gpu-memory-utilization.
  struct MemoryInfo {
    int64_t total = 0;
    int64_t used = 0;
    int64_t free_at_start = 0;
  };
  virtual MemoryInfo DeviceMemory() const { return {}; }

  // ---- one step ----
  // Makes `step` the current step (uploads it, plans attention for every layer). The views
  // handed to the ops below then hold step.num_tokens() rows.
  virtual void BeginStep(const StepDescription& step, KVCache& cache) = 0;

  // out[t] = table[step.token_ids[t]] (rows of any weight dtype, as f32). Throws
  // InvalidArgument for an id outside the table.
  // REQUIRES: table prepared with WeightLayout::kRowMajor.
  virtual void Embedding(const Weight& table, const TensorView& out) = 0;
  // y = x W^T (x [n, W.cols], y [n, W.rows]); with an epilogue, y is scratch and the
  // epilogue's output receives the result. kSiluMulPairs: W is a kPairs16 stack of gate and
  // up; out [n, W.rows / 2].
  virtual void MatMul(const Weight& w, const TensorView& x, const TensorView& y, const Epilogue& ep = {}) = 0;
  // y = x / rms(x) * weight per row (y may alias x).
  virtual void RmsNorm(const TensorView& x, const TensorView& weight, double eps, const TensorView& y) = 0;
  virtual void AddBias(const TensorView& bias, const TensorView& x) = 0;   // x[t] += bias
  virtual void Add(const TensorView& y, const TensorView& x) = 0;          // x += y
  virtual void SiluMul(const TensorView& gate, const TensorView& up, const TensorView& out) = 0;
  virtual void Copy(const TensorView& src, const TensorView& dst) = 0;      // same shape, any strides
  // Rows of x at step.logits_indices -> out [num_logits, x.cols].
  virtual void GatherLogitRows(const TensorView& x, const TensorView& out) = 0;
  // RoPE at the step's positions on x [n, num_heads * head_stride]: dims [offset, offset +
  // rope.dim) of each head.
  virtual void Rope(const RopeParams& rope, const TensorView& x, int64_t num_heads, int64_t head_stride,
                    int64_t offset) = 0;

  // K/V of the step's tokens into their slots (quantizing for quantized formats).
  virtual void WriteKV(KVCache& cache, int64_t layer, const TensorView& k, const TensorView& v) = 0;
  // The query-aware policy's observation (heavy tokens); a no-op when the cache has none.
  virtual void ObserveQueries(KVCache& cache, int64_t layer, const TensorView& q, int64_t num_heads,
                              float scale) = 0;
  // A Llama-family layer's attention inputs in one call: q, k, v copied from in.src_* into
  // in.q/k/v (unless they are the same), the biases added, RoPE on q and k, k and v written
  // into the cache (WriteKV), the queries observed (ObserveQueries). Afterwards in.q holds the
  // rotated queries; in.k and in.v are scratch (a backend may write K/V straight into the cache
  // without them). The default runs those ops in that order; a backend may fuse them if the
  // results are the same bits.
  virtual void WriteAttentionInputs(KVCache& cache, int64_t layer, const AttentionInputs& in);
  // out [n, num_heads * head_dim] = softmax(q K^T * scale) V over each token's sequence.
  virtual void PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                              const TensorView& out) = 0;
  // MLA in its absorbed form: q [n, num_heads * (rank + rope_dim)] -> out [n, num_heads * rank]
  // over the latent cache (model/arch/deepseek.h).
  virtual void MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                            const TensorView& out) = 0;
  // y = sum over the routed experts of weight * expert(x) + shared(x) (model/arch/moe.h).
  virtual void Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) = 0;

  // Result rows to the host (logits).
  virtual void CopyToHost(const TensorView& src, float* dst) = 0;

  // Where a step's logits rows stay for Sample when this backend samples in its own memory: a
  // [rows, vocab] view of a buffer it owns (valid until the next call), which ends the step
  // when the logits MatMul writes it. An empty view (the default): logits go to host memory.
  virtual TensorView LogitsBuffer(int64_t /*rows*/, int64_t /*vocab*/) { return {}; }

  // ---- the sampler's device part: only token ids and the asked-for logprobs come back ----
  virtual std::unique_ptr<SamplerState> CreateSampler(const SamplingParams& params) = 0;
  // One token per row of `logits` [rows.size(), vocab] (host rows may be modified; a
  // LogitsBuffer view is only read): penalties
  // from the row's history, temperature, top-k / top-p / min-p, the draw from the row's state
  // (vLLM's order); the raw logprobs where asked (kernels/cpu/sampler.h is the reference).
  virtual void Sample(const TensorView& logits, std::span<SampleRow> rows) = 0;
  // log_softmax of row i of `logits` for tokens[i] and the top k (prompt logprobs).
  virtual void Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                        std::span<TokenLogprobs> out) = 0;

  // ---- tensor parallelism ----
  // The communicator of the rank this backend serves (not owned; null: no tensor parallelism).
  void SetCommunicator(Communicator* comm) { comm_ = comm; }
  Communicator* communicator() const { return comm_; }
  // x = the sum of x over the ranks (after a row-parallel layer). Nothing without a
  // communicator or with one rank. The default works on host memory (the CPU backend).
  virtual void AllReduce(const TensorView& x);

 private:
  Communicator* comm_ = nullptr;
};

// The process's CPU backend (kernels/cpu), used when nothing else is asked for.
Backend& DefaultCpuBackend();
// A CPU backend of its own (tensor parallelism's ranks: one per rank thread).
std::unique_ptr<Backend> NewCpuBackend();

}  // namespace pagoda
