// The weights of a Hugging Face model directory: `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file}}), as
// transformers looks for them (the single file first).
//
// Every file is memory-mapped once and tensors are used in place; the checkpoint owns the
// mappings (hand them to the model through files() to keep the views alive).
// Thread-compatible: immutable after construction.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors_file.h"

namespace pagoda {

class HfCheckpoint {
 public:
  // Opens dir's safetensors file(s). Throws kNotFound when there is neither
  // model.safetensors nor an index, kCorruptData for a malformed index (naming the field),
  // and whatever SafetensorsFile throws for a bad shard.
  explicit HfCheckpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The tensor called name, or null when no file holds it.
  const SafetensorsTensor* Find(const std::string& name) const;
  // As Find, but throws kNotFound naming the tensor and where it was looked for.
  const SafetensorsTensor& Get(const std::string& name) const;
  // The file holding name (for error messages); "" when absent.
  std::string FileOf(const std::string& name) const;
  // The open files, as owners for LlamaWeights::keep_alive.
  std::vector<std::shared_ptr<const void>> files() const;

 private:
  std::string dir_;
  std::string index_path_;  // empty for a single model.safetensors
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;  // by file name
  std::map<std::string, std::string> weight_map_;                  // tensor -> file name
};

// The pagoda DType of a safetensors float tensor used in place: F32, F16, BF16.
// Throws kUnsupported naming `what` and the stored dtype for anything else.
DType WeightDTypeOf(const SafetensorsTensor& t, const std::string& what);

}  // namespace pagoda
