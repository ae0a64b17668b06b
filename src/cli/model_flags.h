// Flags shared by every command that loads a model and allocates a KV cache
// (generate, bench, serve, eval), with vLLM's names, and what they resolve to.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

struct ModelFlags {
  std::string model;
  bool embedded_default = false;  // no --model: `model` is the embedded pagoda-tiny's unpacked path
  std::string tokenizer;
  std::string dtype = "bf16";
  std::string kv_cache_dtype = "auto";
  int64_t block_size = 16;
  int64_t max_model_len = 0;
  int threads = 0;
  uint64_t seed_weights = 0;
  int64_t kv_quant_group_size = 32;
  std::string kv_skip_layers;  // "0,31"
  int64_t kv_sink_tokens = 0;
  int64_t kv_recent_tokens = 0;
  int64_t kv_heavy_tokens = 0;
  std::string device = "cpu";  // --device cpu | cuda: the backend LoadModel prepares the weights on
  bool enforce_eager = false;  // --enforce-eager: no decode-step graphs (CUDA)
  int tensor_parallel_size = 1;  // --tensor-parallel-size: ranks the model is sharded over

  // Adds --model (default: the embedded pagoda-tiny, cli/default_model.h), --tokenizer, --dtype, --kv-cache-dtype, --block-size,
  // --max-model-len, --threads, and the quantized-KV options --kv-quant-group-size,
  // --kv-cache-dtype-skip-layers, --kv-sink-tokens, --kv-recent-tokens, --kv-heavy-tokens, and
  // --device (cuda needs a build with -DPAGODA_CUDA=ON; otherwise LoadModel throws Unsupported)
  // --enforce-eager and --tensor-parallel-size.
  void Add(CLI::App* app);
  // The quantized-KV options (validated; throws InvalidArgument naming the flag).
  KVQuantOptions KVQuant() const;
  // Applies --threads; loads the model; resolves "auto" for the KV cache.
  std::unique_ptr<Model> LoadModel() const;
  std::unique_ptr<Tokenizer> LoadTokenizer(const Model& model) const;
  DType KVDType(const Model& model) const;
};

// Flags of commands that run the continuous-batching engine (serve, bench, eval), with
// vLLM's names: --kv-cache-memory, --gpu-memory-utilization, --enable-prefix-caching /
// --no-enable-prefix-caching, --prefix-caching-hash-algo, --max-num-seqs,
// --max-num-batched-tokens, --cuda-graph-sizes.
struct EngineFlags {
  std::string kv_cache_memory;
  std::optional<double> gpu_memory_utilization;
  bool enable_prefix_caching = true;
  std::string prefix_caching_hash_algo = "sha256";
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  // --cuda-graph-sizes: none | auto | 1,2,4,... (engine/decode_padding.h); with --device cuda
  // and graphs on, decode steps are padded to these sizes and their graphs captured at start-up.
  std::string cuda_graph_sizes = "auto";

  void Add(CLI::App* app);
  // Sizes the KV cache (logging the "KV cache: ..." line on stderr) and fills the config.
  // Also sizes the model's workspace for the largest step (a dummy batch of
  // --max-num-batched-tokens tokens), whose bytes count outside the KV budget.
  EngineConfig MakeConfig(const ModelFlags& flags, Model& model) const;
};

// Parses "1,2,3" (spaces allowed) into ids; throws InvalidArgument naming `flag`.
std::vector<int32_t> ParseIdList(const std::string& text, const std::string& flag);

}  // namespace pagoda::cli
