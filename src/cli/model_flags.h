// Flags shared by every command that loads a model and allocates a KV cache
// (generate, bench, serve, eval), with vLLM's names, and what they resolve to.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

struct ModelFlags {
  std::string model;
  std::string tokenizer;
  std::string dtype = "bf16";
  std::string kv_cache_dtype = "auto";
  int64_t block_size = 16;
  int64_t max_model_len = 0;
  int threads = 0;
  uint64_t seed_weights = 0;

  // Adds --model (required), --tokenizer, --dtype, --kv-cache-dtype, --block-size,
  // --max-model-len, --threads.
  void Add(CLI::App* app);
  // Applies --threads; loads the model; resolves "auto" for the KV cache.
  std::unique_ptr<Model> LoadModel() const;
  std::unique_ptr<Tokenizer> LoadTokenizer(const Model& model) const;
  DType KVDType(const Model& model) const;
};

// Parses "1,2,3" (spaces allowed) into ids; throws InvalidArgument naming `flag`.
std::vector<int32_t> ParseIdList(const std::string& text, const std::string& flag);

}  // namespace pagoda::cli
