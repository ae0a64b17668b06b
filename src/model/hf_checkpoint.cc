#include "model/hf_checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"

namespace pagoda {

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (FileExists(single)) {
    auto f = std::make_shared<SafetensorsFile>(single);
    for (const auto& [name, t] : f->tensors()) weight_map_[name] = "model.safetensors";
    files_["model.safetensors"] = std::move(f);
    return;
  }
  if (!FileExists(index)) {
    ThrowNotFound(dir +
                  ": no model.safetensors or model.safetensors.index.json (a Hugging Face "
                  "model directory needs its safetensors weights)");
  }
  index_path_ = index;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(ReadTextFile(index));
  } catch (const nlohmann::json::exception& e) {
    ThrowCorrupt(index + ": not valid JSON: " + e.what());
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
    ThrowCorrupt(index + ": field 'weight_map' is missing or not an object");
  }
  for (const auto& [name, file] : root["weight_map"].items()) {
    if (!file.is_string())
      ThrowCorrupt(index + ": field 'weight_map." + name + "' is not a file name");
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos ||
        shard.find("..") != std::string::npos) {
      ThrowCorrupt(index + ": field 'weight_map." + name + "' names '" + shard +
                   "', not a file in the model directory");
    }
    weight_map_[name] = shard;
    if (!files_.contains(shard))
      files_[shard] = std::make_shared<SafetensorsFile>(dir + "/" + shard);
  }
}

const SafetensorsTensor* HfCheckpoint::Find(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) return nullptr;
  const SafetensorsFile& f = *files_.at(it->second);
  const SafetensorsTensor* t = f.Find(name);
  if (t == nullptr) {
    ThrowCorrupt(index_path_ + ": tensor '" + name + "' is mapped to " + it->second +
                 ", which does not hold it");
  }
  return t;
}

const SafetensorsTensor& HfCheckpoint::Get(const std::string& name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    ThrowNotFound(dir_ + "/" +
                  (index_path_.empty() ? "model.safetensors" : "model.safetensors.index.json") +
                  ": missing tensor '" + name + "'");
  }
  return *t;
}

std::string HfCheckpoint::FileOf(const std::string& name) const {
  auto it = weight_map_.find(name);
  return it == weight_map_.end() ? std::string() : dir_ + "/" + it->second;
}

std::vector<std::shared_ptr<const void>> HfCheckpoint::files() const {
  std::vector<std::shared_ptr<const void>> out;
  for (const auto& [name, f] : files_) out.push_back(f);
  return out;
}

DType WeightDTypeOf(const SafetensorsTensor& t, const std::string& what) {
  switch (t.dtype) {
    case SafetensorsDType::kF32:
      return DType::kF32;
    case SafetensorsDType::kF16:
      return DType::kF16;
    case SafetensorsDType::kBF16:
      return DType::kBF16;
    default:
      ThrowUnsupported(what + ": dtype " + t.dtype_name +
                       " is not supported (expected F32, F16 or BF16)");
  }
}

}  // namespace pagoda
