#include "io/safetensors_file.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"

namespace pagoda {
namespace {

bool ParseDType(const std::string& s, SafetensorsDType* out) {
  static const std::pair<const char*, SafetensorsDType> kTable[] = {
      {"F64", SafetensorsDType::kF64},   {"F32", SafetensorsDType::kF32},
      {"F16", SafetensorsDType::kF16},   {"BF16", SafetensorsDType::kBF16},
      {"I64", SafetensorsDType::kI64},   {"I32", SafetensorsDType::kI32},
      {"I16", SafetensorsDType::kI16},   {"I8", SafetensorsDType::kI8},
      {"U8", SafetensorsDType::kU8},     {"BOOL", SafetensorsDType::kBool},
      {"F8_E4M3", SafetensorsDType::kF8E4M3}, {"F8_E5M2", SafetensorsDType::kF8E5M2}};
  for (const auto& [name, t] : kTable) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

}  // namespace

int64_t SafetensorsDTypeSize(SafetensorsDType t) {
  switch (t) {
    case SafetensorsDType::kF64: case SafetensorsDType::kI64: return 8;
    case SafetensorsDType::kF32: case SafetensorsDType::kI32: return 4;
    case SafetensorsDType::kF16: case SafetensorsDType::kBF16: case SafetensorsDType::kI16: return 2;
    default: return 1;
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  auto corrupt = [&](const std::string& what) { ThrowCorrupt(path + ": invalid safetensors file: " + what); };
  if (file_.size() < 8) corrupt("shorter than its 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, file_.data(), 8);
  if (header_len > file_.size() - 8 || header_len > (100ull << 20)) {
    corrupt("header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(file_.size()));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    corrupt(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) corrupt("header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_.size() - data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object()) {
        for (const auto& [k, v] : info.items()) {
          if (v.is_string()) metadata_[k] = v.get<std::string>();
        }
      }
      continue;
    }
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() ||
        !info.contains("shape") || !info["shape"].is_array() || !info.contains("data_offsets") ||
        !info["data_offsets"].is_array() || info["data_offsets"].size() != 2) {
      corrupt("tensor '" + name + "' needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype_name = info["dtype"].get<std::string>();
    if (!ParseDType(t.dtype_name, &t.dtype)) {
      ThrowUnsupported(path + ": tensor '" + name + "' has unsupported dtype " + t.dtype_name);
    }
    int64_t n = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) corrupt("tensor '" + name + "' has a bad shape");
      const int64_t dim = d.get<int64_t>();
      if (dim != 0 && n > (int64_t{1} << 42) / dim) corrupt("tensor '" + name + "' is too large");
      t.shape.push_back(dim);
      n *= dim;
    }
    const auto& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      corrupt("tensor '" + name + "' has non-integer data_offsets");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    t.num_elements = n;
    t.num_bytes = n * SafetensorsDTypeSize(t.dtype);
    if (begin > end || end > data_size) {
      corrupt("tensor '" + name + "' bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
              ") run past the end of the data (" + std::to_string(data_size) + " bytes): truncated file?");
    }
    if (end - begin != static_cast<uint64_t>(t.num_bytes)) {
      corrupt("tensor '" + name + "' has " + std::to_string(end - begin) + " bytes, its shape needs " +
              std::to_string(t.num_bytes));
    }
    t.data = file_.data() + data_start + begin;
    tensors_.emplace(name, std::move(t));
  }
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const SafetensorsTensor& SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) ThrowNotFound(path() + ": missing tensor '" + name + "'");
  return *t;
}

std::vector<float> SafetensorsFile::ReadF32(const std::string& name) const {
  const SafetensorsTensor& t = Get(name);
  std::vector<float> out(t.num_elements);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    const uint8_t* p = t.data + i * SafetensorsDTypeSize(t.dtype);
    switch (t.dtype) {
      case SafetensorsDType::kF32: std::memcpy(&out[i], p, 4); break;
      case SafetensorsDType::kF64: { double d; std::memcpy(&d, p, 8); out[i] = static_cast<float>(d); break; }
      case SafetensorsDType::kF16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = F16ToF32(h); break; }
      case SafetensorsDType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = Bf16ToF32(h); break; }
      default: ThrowInvalidArgument(path() + ": tensor '" + name + "' is not a float tensor");
    }
  }
  return out;
}

std::vector<int64_t> SafetensorsFile::ReadI64(const std::string& name) const {
  const SafetensorsTensor& t = Get(name);
  std::vector<int64_t> out(t.num_elements);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    const uint8_t* p = t.data + i * SafetensorsDTypeSize(t.dtype);
    switch (t.dtype) {
      case SafetensorsDType::kI64: std::memcpy(&out[i], p, 8); break;
      case SafetensorsDType::kI32: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      default: ThrowInvalidArgument(path() + ": tensor '" + name + "' is not an integer tensor");
    }
  }
  return out;
}

}  // namespace pagoda
