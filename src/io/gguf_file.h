// GGUF (v2 and v3) reader: metadata key/values, tensor infos and tensor data used in
// place from a memory map.
//
// Every length, count, offset and shape is checked against the file before use, so a
// truncated or corrupt file raises pagoda::Error (kCorruptData) naming the file, the
// byte offset and what was being read, never reads out of bounds.
// Not thread-safe while constructing; read-only (thread-safe) afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace pagoda {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufType type = GgufType::kU8;
  std::vector<GgufValue> values;
};

// A metadata value: integers are widened to int64/uint64, floats to double.
struct GgufValue {
  GgufType type = GgufType::kU8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the innermost (contiguous) dim
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the GgufFile lives
};

// Maps a ggml type id to a DType; throws kUnsupported naming the type for others.
DType DTypeFromGgml(uint32_t ggml_type, const std::string& context);

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  bool Has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufValue* Find(const std::string& key) const;
  // Typed getters: throw kNotFound when absent (without a default) and kCorruptData
  // when the stored type does not convert, naming the key.
  int64_t GetInt(const std::string& key) const;
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetFloat(const std::string& key) const;
  double GetFloat(const std::string& key, double fallback) const;
  bool GetBool(const std::string& key, bool fallback) const;
  std::string GetString(const std::string& key) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> GetStringArray(const std::string& key) const;
  std::vector<double> GetFloatArray(const std::string& key) const;
  std::vector<int64_t> GetIntArray(const std::string& key) const;

  const GgufTensor* FindTensor(const std::string& name) const;
  // Throws kNotFound naming the tensor and the file.
  const GgufTensor& GetTensor(const std::string& name) const;

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace pagoda
