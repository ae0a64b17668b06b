// safetensors reader: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// tensor bytes. Tensors are used in place from the memory map.
//
// Every offset and shape is checked against the file: a truncated or inconsistent
// file raises pagoda::Error (kCorruptData) naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace pagoda {

enum class SafetensorsDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::string dtype_name;      // as written in the header ("BF16", ...)
  std::vector<int64_t> shape;  // row-major, outermost first
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // valid while the file lives
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* Find(const std::string& name) const;
  // Throws kNotFound naming the tensor and the file.
  const SafetensorsTensor& Get(const std::string& name) const;

  // Copies a tensor to f32 / i64 (any float dtype / any integer dtype); for tests and
  // small tensors.
  std::vector<float> ReadF32(const std::string& name) const;
  std::vector<int64_t> ReadI64(const std::string& name) const;

 private:
  MappedFile file_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

int64_t SafetensorsDTypeSize(SafetensorsDType t);

}  // namespace pagoda
