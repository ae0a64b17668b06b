// Model: a forward pass over a ragged batch of tokens with a paged KV cache.
//
// One call processes any mix of prefill chunks and decode tokens. For each token the
// caller gives its position, the slot its K/V goes to, and its sequence's block table;
// tokens whose index is listed in logits_indices get a row of logits.
// Thread-compatible: one Forward at a time per Model (kernels use the thread pool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_storage.h"
#include "model/model_spec.h"

namespace pagoda {

struct ForwardBatch {
  std::vector<int32_t> token_ids;             // [num_tokens]
  std::vector<int32_t> positions;             // [num_tokens]
  std::vector<int64_t> slot_mapping;          // [num_tokens] block_id * block_size + offset
  std::vector<const int32_t*> block_tables;   // [num_tokens] the token's sequence block table
  std::vector<int32_t> logits_indices;        // tokens that need logits, in output order

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// Optional hooks for tests and debugging: the residual stream entering each layer
// (layer 0 = embeddings) and the final normed output (layer = num_layers).
struct ForwardObserver {
  std::function<void(int64_t layer, const float* x, int64_t num_tokens, int64_t dim)> on_hidden;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;
  // The KV cache shape this model needs per token (heads x dims), given a block count.
  virtual KVStorageShape KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const = 0;
  // logits: [logits_indices.size(), vocab_size] f32.
  virtual void Forward(const ForwardBatch& batch, KVStorage& cache, float* logits,
                       const ForwardObserver* observer = nullptr) = 0;
  // Bytes of weights the model reads per decoded token (for the decode roofline).
  virtual int64_t WeightBytesPerToken() const = 0;
  // The EOS ids the model's files declare (generation_config.json, GGUF); may be empty.
  virtual std::vector<int32_t> eos_ids() const { return {}; }
};

struct LoadOptions {
  std::string dtype = "bf16";  // dummy weights: bf16 | f16 | f32 (| q8_0 | q4_0)
  uint64_t seed = 0;           // dummy weights
};

// Loads a model from a --model argument: "dummy:<preset>", a .gguf file, a llama2.c
// .bin, or a Hugging Face directory. Throws pagoda::Error naming the file and the
// problem (missing file, unknown architecture or tensor type, truncated data).
std::unique_ptr<Model> LoadModel(const std::string& model_arg, const LoadOptions& options = {});

}  // namespace pagoda
