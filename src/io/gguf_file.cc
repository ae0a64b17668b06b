#include "io/gguf_file.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// A bounds-checked cursor over the mapped bytes.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void Fail(const std::string& what) const {
    std::ostringstream ss;
    ss << path_ << ": corrupt or truncated GGUF at byte " << pos_ << ": " << what;
    ThrowCorrupt(ss.str());
  }

  template <typename T>
  T Read(const char* what) {
    if (remaining() < sizeof(T)) Fail(std::string("file ends inside ") + what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string ReadString(const char* what) {
    const uint64_t n = Read<uint64_t>(what);
    if (n > kMaxStringBytes || n > remaining()) {
      Fail(std::string(what) + " has length " + std::to_string(n) + ", past the end of the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

GgufValue ReadValue(Reader& r, GgufType type, const std::string& key, int depth) {
  GgufValue out;
  out.type = type;
  switch (type) {
    case GgufType::kU8: out.v = static_cast<uint64_t>(r.Read<uint8_t>(key.c_str())); break;
    case GgufType::kI8: out.v = static_cast<int64_t>(r.Read<int8_t>(key.c_str())); break;
    case GgufType::kU16: out.v = static_cast<uint64_t>(r.Read<uint16_t>(key.c_str())); break;
    case GgufType::kI16: out.v = static_cast<int64_t>(r.Read<int16_t>(key.c_str())); break;
    case GgufType::kU32: out.v = static_cast<uint64_t>(r.Read<uint32_t>(key.c_str())); break;
    case GgufType::kI32: out.v = static_cast<int64_t>(r.Read<int32_t>(key.c_str())); break;
    case GgufType::kU64: out.v = r.Read<uint64_t>(key.c_str()); break;
    case GgufType::kI64: out.v = r.Read<int64_t>(key.c_str()); break;
    case GgufType::kF32: out.v = static_cast<double>(r.Read<float>(key.c_str())); break;
    case GgufType::kF64: out.v = r.Read<double>(key.c_str()); break;
    case GgufType::kBool: {
      const uint8_t b = r.Read<uint8_t>(key.c_str());
      if (b > 1) r.Fail("key '" + key + "': bool value " + std::to_string(b));
      out.v = b != 0;
      break;
    }
    case GgufType::kString: out.v = r.ReadString(key.c_str()); break;
    case GgufType::kArray: {
      if (depth > 2) r.Fail("key '" + key + "': arrays nested too deeply");
      const uint32_t elem_type = r.Read<uint32_t>(key.c_str());
      if (elem_type > static_cast<uint32_t>(GgufType::kF64)) {
        r.Fail("key '" + key + "': unknown array element type " + std::to_string(elem_type));
      }
      const uint64_t n = r.Read<uint64_t>(key.c_str());
      const auto et = static_cast<GgufType>(elem_type);
      if (n > r.remaining() / MinEncodedSize(et)) {
        r.Fail("key '" + key + "': array of " + std::to_string(n) +
               " elements does not fit in the file");
      }
      auto arr = std::make_shared<GgufArray>();
      arr->type = et;
      arr->values.reserve(n);
      for (uint64_t i = 0; i < n; ++i) arr->values.push_back(ReadValue(r, et, key, depth + 1));
      out.v = std::move(arr);
      break;
    }
    default: r.Fail("key '" + key + "': unknown value type " + std::to_string(static_cast<uint32_t>(type)));
  }
  return out;
}

bool AsInt(const GgufValue& v, int64_t* out) {
  if (auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (auto* i = std::get_if<int64_t>(&v.v)) { *out = *i; return true; }
  if (auto* b = std::get_if<bool>(&v.v)) { *out = *b; return true; }
  return false;
}

bool AsFloat(const GgufValue& v, double* out) {
  if (auto* d = std::get_if<double>(&v.v)) { *out = *d; return true; }
  int64_t i;
  if (AsInt(v, &i)) { *out = static_cast<double>(i); return true; }
  return false;
}

}  // namespace

DType DTypeFromGgml(uint32_t t, const std::string& context) {
  switch (t) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 30: return DType::kBF16;
    default: break;
  }
  static const char* kNames[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                 "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                 "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
                                 "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M"};
  std::string name = t < std::size(kNames) ? kNames[t] : "#" + std::to_string(t);
  ThrowUnsupported(context + ": tensor type " + name +
                   " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  Reader r(path, file_.data(), file_.size());
  if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0) {
    ThrowCorrupt(path + ": not a GGUF file (the first bytes are not 'GGUF')");
  }
  r.Read<uint32_t>("magic");
  version_ = r.Read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    ThrowUnsupported(path + ": GGUF version " + std::to_string(version_) +
                     " is not supported (supported: 2, 3)");
  }
  const uint64_t num_tensors = r.Read<uint64_t>("tensor count");
  const uint64_t num_kv = r.Read<uint64_t>("metadata count");
  // Each key/value takes at least 12 bytes, each tensor info at least 24.
  if (num_kv > r.remaining() / 12) r.Fail("metadata count " + std::to_string(num_kv) + " is too large");
  if (num_tensors > r.remaining() / 24) r.Fail("tensor count " + std::to_string(num_tensors) + " is too large");

  for (uint64_t i = 0; i < num_kv; ++i) {
    std::string key = r.ReadString("metadata key");
    const uint32_t type = r.Read<uint32_t>("metadata value type");
    if (type > static_cast<uint32_t>(GgufType::kF64)) {
      r.Fail("key '" + key + "': unknown value type " + std::to_string(type));
    }
    GgufValue v = ReadValue(r, static_cast<GgufType>(type), key, 0);
    if (!metadata_.emplace(key, std::move(v)).second) r.Fail("duplicate key '" + key + "'");
  }

  struct RawInfo {
    size_t info_offset;
    uint64_t data_offset;
  };
  std::vector<RawInfo> raw;
  tensors_.reserve(num_tensors);
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensor t;
    const size_t info_offset = r.offset();
    t.name = r.ReadString("tensor name");
    const uint32_t n_dims = r.Read<uint32_t>("tensor dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      r.Fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = r.Read<uint64_t>("tensor shape");
      if (dim == 0 || dim > (1ull << 40) || static_cast<uint64_t>(n) > (1ull << 42) / dim) {
        r.Fail("tensor '" + t.name + "' has an invalid shape");
      }
      t.shape.push_back(static_cast<int64_t>(dim));
      n *= static_cast<int64_t>(dim);
    }
    t.ggml_type = r.Read<uint32_t>("tensor type");
    t.dtype = DTypeFromGgml(t.ggml_type, path + ": tensor '" + t.name + "'");
    if (t.shape[0] % DTypeBlockSize(t.dtype) != 0) {
      r.Fail("tensor '" + t.name + "': row length " + std::to_string(t.shape[0]) +
             " is not a multiple of the " + std::string(DTypeName(t.dtype)) + " block size");
    }
    t.num_elements = n;
    t.num_bytes = DTypeRowBytes(t.dtype, n);
    raw.push_back({info_offset, r.Read<uint64_t>("tensor data offset")});
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) r.Fail("duplicate tensor '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }

  int64_t alignment = GetInt("general.alignment", 32);
  if (alignment <= 0 || alignment > (1 << 20) || (alignment & (alignment - 1)) != 0) {
    ThrowCorrupt(path + ": general.alignment " + std::to_string(alignment) + " is not a power of two");
  }
  const uint64_t data_start = (r.offset() + alignment - 1) / alignment * alignment;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    const uint64_t off = raw[i].data_offset;
    if (off % alignment != 0) {
      ThrowCorrupt(path + ": tensor '" + t.name + "' data offset " + std::to_string(off) +
                   " is not aligned to " + std::to_string(alignment));
    }
    if (data_start > file_.size() || off > file_.size() - data_start ||
        static_cast<uint64_t>(t.num_bytes) > file_.size() - data_start - off) {
      ThrowCorrupt(path + ": tensor '" + t.name + "' (" + std::to_string(t.num_bytes) +
                   " bytes at offset " + std::to_string(data_start + off) +
                   ") extends past the end of the file (" + std::to_string(file_.size()) +
                   " bytes): the file is truncated");
    }
    t.data = file_.data() + data_start + off;
  }
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

int64_t GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) ThrowNotFound(path() + ": missing metadata key '" + key + "'");
  int64_t out;
  if (!AsInt(*v, &out)) ThrowCorrupt(path() + ": metadata key '" + key + "' is not an integer");
  return out;
}

int64_t GgufFile::GetInt(const std::string& key, int64_t fallback) const {
  return Has(key) ? GetInt(key) : fallback;
}

double GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) ThrowNotFound(path() + ": missing metadata key '" + key + "'");
  double out;
  if (!AsFloat(*v, &out)) ThrowCorrupt(path() + ": metadata key '" + key + "' is not a number");
  return out;
}

double GgufFile::GetFloat(const std::string& key, double fallback) const {
  return Has(key) ? GetFloat(key) : fallback;
}

bool GgufFile::GetBool(const std::string& key, bool fallback) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return fallback;
  int64_t out;
  if (!AsInt(*v, &out)) ThrowCorrupt(path() + ": metadata key '" + key + "' is not a bool");
  return out != 0;
}

std::string GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) ThrowNotFound(path() + ": missing metadata key '" + key + "'");
  const auto* s = std::get_if<std::string>(&v->v);
  if (s == nullptr) ThrowCorrupt(path() + ": metadata key '" + key + "' is not a string");
  return *s;
}

std::string GgufFile::GetString(const std::string& key, const std::string& fallback) const {
  return Has(key) ? GetString(key) : fallback;
}

namespace {
const GgufArray& GetArray(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) ThrowNotFound(f.path() + ": missing metadata key '" + key + "'");
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v->v);
  if (a == nullptr) ThrowCorrupt(f.path() + ": metadata key '" + key + "' is not an array");
  return **a;
}
}  // namespace

std::vector<std::string> GgufFile::GetStringArray(const std::string& key) const {
  const GgufArray& a = GetArray(*this, key);
  std::vector<std::string> out;
  out.reserve(a.values.size());
  for (const auto& v : a.values) {
    const auto* s = std::get_if<std::string>(&v.v);
    if (s == nullptr) ThrowCorrupt(path() + ": metadata key '" + key + "' is not an array of strings");
    out.push_back(*s);
  }
  return out;
}

std::vector<double> GgufFile::GetFloatArray(const std::string& key) const {
  const GgufArray& a = GetArray(*this, key);
  std::vector<double> out;
  out.reserve(a.values.size());
  for (const auto& v : a.values) {
    double d;
    if (!AsFloat(v, &d)) ThrowCorrupt(path() + ": metadata key '" + key + "' is not an array of numbers");
    out.push_back(d);
  }
  return out;
}

std::vector<int64_t> GgufFile::GetIntArray(const std::string& key) const {
  const GgufArray& a = GetArray(*this, key);
  std::vector<int64_t> out;
  out.reserve(a.values.size());
  for (const auto& v : a.values) {
    int64_t i;
    if (!AsInt(v, &i)) ThrowCorrupt(path() + ": metadata key '" + key + "' is not an array of integers");
    out.push_back(i);
  }
  return out;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::GetTensor(const std::string& name) const {
  const GgufTensor* t = FindTensor(name);
  if (t == nullptr) ThrowNotFound(path() + ": missing tensor '" + name + "'");
  return *t;
}

}  // namespace pagoda
