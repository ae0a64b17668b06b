#include "model/hf_loader.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/mapped_file.h"
#include "model/arch/llama.h"
#include "model/deepseek_loader.h"
#include "model/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/weight_views.h"

namespace pagoda {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

// The tensor `name` with exactly `shape`, or a kCorruptData error naming file and tensor.
const SafetensorsTensor& Checked(const HfCheckpoint& c, const std::string& name,
                                 const std::vector<int64_t>& shape, std::string* what) {
  const SafetensorsTensor& t = c.Get(name);
  *what = c.FileOf(name) + ": tensor '" + name + "'";
  PAGODA_ENSURE(t.shape == shape, ErrorCode::kCorruptData,
                *what << " has shape " << ShapeString(t.shape) << ", expected "
                      << ShapeString(shape) << " (from config.json)");
  return t;
}

WeightMatrix Matrix(const HfCheckpoint& c, const std::string& name, int64_t rows, int64_t cols) {
  std::string what;
  const SafetensorsTensor& t = Checked(c, name, {rows, cols}, &what);
  const DType dtype = WeightDTypeOf(t, what);
  // Kernels read elements in place; safetensors writers align the data section to 8 bytes.
  PAGODA_ENSURE(reinterpret_cast<uintptr_t>(t.data) % DTypeBlockBytes(dtype) == 0,
                ErrorCode::kUnsupported, what << " is not aligned to its element size in the file");
  return MakeWeightView(dtype, t.data, t.num_elements, rows, cols, what);
}

std::vector<float> Vector(const HfCheckpoint& c, const std::string& name, int64_t n) {
  std::string what;
  const SafetensorsTensor& t = Checked(c, name, {n}, &what);
  return ToF32(WeightDTypeOf(t, what), t.data, t.num_elements, n, what);
}

LlamaLayerWeights LayerWeights(const HfCheckpoint& c, const ModelSpec& spec, int64_t l) {
  const int64_t dim = spec.dim, ffn = spec.ffn_dim;
  const int64_t q_dim = spec.num_heads * spec.head_dim, kv_dim = spec.num_kv_heads * spec.head_dim;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  LlamaLayerWeights L;
  L.attn_norm = Vector(c, p + "input_layernorm.weight", dim);
  L.ffn_norm = Vector(c, p + "post_attention_layernorm.weight", dim);
  L.wq = Matrix(c, p + "self_attn.q_proj.weight", q_dim, dim);
  L.wk = Matrix(c, p + "self_attn.k_proj.weight", kv_dim, dim);
  L.wv = Matrix(c, p + "self_attn.v_proj.weight", kv_dim, dim);
  L.wo = Matrix(c, p + "self_attn.o_proj.weight", dim, q_dim);
  if (spec.qkv_bias) {
    L.bq = Vector(c, p + "self_attn.q_proj.bias", q_dim);
    L.bk = Vector(c, p + "self_attn.k_proj.bias", kv_dim);
    L.bv = Vector(c, p + "self_attn.v_proj.bias", kv_dim);
  }
  // Llama's attention_bias also puts a bias on o_proj, which LlamaModel does not have.
  if (c.Find(p + "self_attn.o_proj.bias") != nullptr) {
    ThrowUnsupported(c.FileOf(p + "self_attn.o_proj.bias") + ": tensor '" + p +
                     "self_attn.o_proj.bias': an output-projection bias is not supported");
  }
  L.w_gate = Matrix(c, p + "mlp.gate_proj.weight", ffn, dim);
  L.w_up = Matrix(c, p + "mlp.up_proj.weight", ffn, dim);
  L.w_down = Matrix(c, p + "mlp.down_proj.weight", dim, ffn);
  return L;
}

// eos_token_id as an int or a list of ints; `source` names the file in errors.
std::vector<int32_t> EosFrom(const nlohmann::json& root, const std::string& source) {
  std::vector<int32_t> ids;
  if (!root.is_object() || !root.contains("eos_token_id") || root["eos_token_id"].is_null())
    return ids;
  const nlohmann::json& v = root["eos_token_id"];
  auto add = [&](const nlohmann::json& e) {
    if (!e.is_number_integer()) {
      ThrowCorrupt(source +
                   ": field 'eos_token_id' must be an integer or a list of integers (got " +
                   e.dump() + ")");
    }
    const int32_t id = e.get<int32_t>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (v.is_array()) {
    for (const auto& e : v) add(e);
  } else {
    add(v);
  }
  return ids;
}

}  // namespace

std::vector<int32_t> ReadHfEosIds(const std::string& dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = dir + "/" + name;
    if (!FileExists(path)) continue;
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(ReadTextFile(path));
    } catch (const nlohmann::json::exception& e) {
      ThrowCorrupt(path + ": not valid JSON: " + e.what());
    }
    if (root.is_object() && root.contains("eos_token_id")) return EosFrom(root, path);
  }
  return {};
}

std::unique_ptr<Model> LoadHfModel(const std::string& dir, Backend& backend) {
  ModelSpec spec = SpecFromHfConfigFile(dir);
  if (spec.architecture == "deepseek_v2" || spec.architecture == "deepseek_v3") {
    return LoadDeepseekHfModel(dir, std::move(spec), backend);
  }
  if (spec.architecture != "llama" && spec.architecture != "mistral" &&
      spec.architecture != "qwen2") {
    ThrowUnsupported(dir + "/config.json: architecture '" + spec.architecture +
                     "' is not supported from safetensors");
  }
  const HfCheckpoint c(dir);
  const int64_t dim = spec.dim;
  LlamaWeights w;
  w.keep_alive = c.files();
  w.embedding = Matrix(c, "model.embed_tokens.weight", spec.vocab_size, dim);
  // Tied models may still store lm_head.weight (a copy); transformers ties it to the
  // embedding either way.
  w.output = spec.tied_embeddings ? w.embedding : Matrix(c, "lm_head.weight", spec.vocab_size, dim);
  w.final_norm = Vector(c, "model.norm.weight", dim);
  for (int64_t l = 0; l < spec.num_layers; ++l) w.layers.push_back(LayerWeights(c, spec, l));
  spec.weight_dtype = w.layers.empty() ? w.embedding.dtype : w.layers[0].wq.dtype;
  auto model = std::make_unique<LlamaModel>(std::move(spec), std::move(w), ReadHfEosIds(dir));
  model->Prepare(backend);
  return model;
}

}  // namespace pagoda
