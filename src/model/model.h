// Model: a forward pass over a ragged batch of tokens with a paged KV cache, written once
// against the Backend interface (backend/backend.h) and run on whichever device prepared its
// weights.
//
// One call processes any mix of prefill chunks and decode tokens, as the step description
// (backend/step_description.h) lays them out: each token's position, the slot its K/V goes
// to, its sequence's block table; tokens listed in logits_indices get a row of logits.
// Thread-compatible: one Forward at a time per Model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kv_cache.h"
#include "backend/step_description.h"
#include "backend/workspace.h"
#include "model/model_spec.h"

namespace pagoda {

// Optional hooks for tests and debugging: the residual stream entering each layer
// (layer 0 = embeddings) and the final normed output (layer = num_layers). x is on the
// backend's device (host memory for the CPU backend).
struct ForwardObserver {
  std::function<void(int64_t layer, const float* x, int64_t num_tokens, int64_t dim)> on_hidden;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;
  // The KV cache shape this model needs per token (heads x dims), given a block count.
  virtual KVStorageShape KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const = 0;

  // Prepares the weights on `backend` (packs or uploads them; LoadModel does it). The
  // backend must outlive the model. REQUIRES: called once, before anything below.
  void Prepare(Backend& backend);
  // The backend the weights were prepared on.
  Backend& backend() const;

  // Sizes the workspace for steps of up to max_tokens tokens with up to max_logits rows of
  // logits, so that such steps allocate nothing (a larger step grows it).
  virtual void ReserveWorkspace(int64_t max_tokens, int64_t max_logits) = 0;
  // Allocations the workspace has made so far (a warmed-up step adds none).
  int64_t workspace_allocations() const { return ws_.num_allocations(); }
  // Bytes the workspace holds (activations of the largest step reserved so far).
  int64_t workspace_bytes() const { return ws_.floats() * static_cast<int64_t>(sizeof(float)); }

  // Runs `step` on `backend` (the one the weights were prepared on) over `cache` (made by
  // it) and writes logits [step.num_logits(), vocab_size] f32 to `logits`.
  virtual void Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
                       const ForwardObserver* observer = nullptr) = 0;
  // Bytes of weights the model reads per decoded token (for the decode roofline).
  virtual int64_t WeightBytesPerToken() const = 0;
  // The EOS ids the model's files declare (generation_config.json, GGUF); may be empty.
  virtual std::vector<int32_t> eos_ids() const { return {}; }

  // Tensor parallelism (Megatron style): rank `rank` of `size`'s shard of this model, prepared
  // on `backend`, whose communicator joins the ranks. Each rank holds its KV heads with their
  // query heads (q/k/v rows, the output projection's columns) and a slice of the MLP (gate/up
  // rows, the down projection's columns); the embedding, the norms and the LM head are
  // replicated; the row-parallel outputs are summed by Backend::AllReduce, so every rank carries
  // the whole residual stream and computes the same logits. Its spec() has the rank's heads and
  // MLP width. Throws Unsupported for architectures without a sharded form or when `size` does
  // not divide the KV heads and the MLP width.
  virtual std::unique_ptr<Model> Shard(int rank, int size, Backend& backend) const;
  // How many copies of spec().kv_shape()'s bytes per token the model's KV cache stores: 1,
  // except under tensor parallelism with fewer KV heads than ranks (each head is replicated)
  // and for MLA (the latent cache is on every rank). KV sizing multiplies by it.
  virtual int64_t KVCopies() const { return 1; }

 protected:
  // The model's part of Prepare: its weights as Backend::Weights.
  virtual void PrepareWeights(Backend& backend) = 0;
  void CheckBackend(const Backend& backend) const;

  Workspace ws_;

 private:
  Backend* backend_ = nullptr;
};

// Runs one sequence's tokens [first, first + count) of `tokens` (its ids from position 0) with
// its block table `blocks` through `model` on the model's backend, as one step built by
// `builder` (the helper generate, eval, bench latency and the tests share). logits:
// kLast [1, vocab] of the last token, kAll [count, vocab], kNone: not written (may be null).
enum class LogitRows { kNone, kLast, kAll };
void ForwardSequence(Model& model, KVCache& cache, StepBuilder& builder, std::span<const int32_t> tokens,
                     int64_t first, int64_t count, std::span<const int32_t> blocks, LogitRows rows, float* logits,
                     const ForwardObserver* observer = nullptr);

struct LoadOptions {
  std::string dtype = "bf16";  // dummy weights: bf16 | f16 | f32 (| q8_0 | q4_0)
  uint64_t seed = 0;           // dummy weights
  Backend* backend = nullptr;  // where the weights go; null: DefaultCpuBackend()
};

// Loads a model from a --model argument: "dummy:<preset>", a .gguf file, a llama2.c
// .bin, or a Hugging Face directory, and prepares it on options.backend. Throws pagoda::Error
// naming the file and the problem (missing file, unknown architecture or tensor type,
// truncated data).
std::unique_ptr<Model> LoadModel(const std::string& model_arg, const LoadOptions& options = {});

}  // namespace pagoda
