#include "model/gguf_loader.h"

#include <memory>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/arch/llama.h"
#include "model/spec_loader.h"
#include "model/weight_views.h"

namespace pagoda {
namespace {

WeightMatrix Matrix(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensor& t = f.GetTensor(name);
  return MakeWeightView(t.dtype, t.data, t.num_elements, rows, cols, f.path() + ": tensor '" + name + "'");
}

std::vector<float> Vector(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensor& t = f.GetTensor(name);
  return ToF32(t.dtype, t.data, t.num_elements, n, f.path() + ": tensor '" + name + "'");
}

}  // namespace

std::unique_ptr<Model> LoadGgufModel(const std::string& path, Backend& backend) {
  auto file = std::make_shared<GgufFile>(path);
  const GgufFile& f = *file;
  ModelSpec spec = SpecFromGguf(f);
  const int64_t dim = spec.dim, hd = spec.head_dim, ffn = spec.ffn_dim;
  LlamaWeights w;
  w.keep_alive.push_back(file);
  w.embedding = Matrix(f, "token_embd.weight", spec.vocab_size, dim);
  w.output = spec.tied_embeddings ? w.embedding : Matrix(f, "output.weight", spec.vocab_size, dim);
  w.final_norm = Vector(f, "output_norm.weight", dim);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights L;
    L.attn_norm = Vector(f, p + "attn_norm.weight", dim);
    L.ffn_norm = Vector(f, p + "ffn_norm.weight", dim);
    L.wq = Matrix(f, p + "attn_q.weight", spec.num_heads * hd, dim);
    L.wk = Matrix(f, p + "attn_k.weight", spec.num_kv_heads * hd, dim);
    L.wv = Matrix(f, p + "attn_v.weight", spec.num_kv_heads * hd, dim);
    L.wo = Matrix(f, p + "attn_output.weight", dim, spec.num_heads * hd);
    if (spec.qkv_bias) {
      L.bq = Vector(f, p + "attn_q.bias", spec.num_heads * hd);
      L.bk = Vector(f, p + "attn_k.bias", spec.num_kv_heads * hd);
      L.bv = Vector(f, p + "attn_v.bias", spec.num_kv_heads * hd);
    }
    L.w_gate = Matrix(f, p + "ffn_gate.weight", ffn, dim);
    L.w_up = Matrix(f, p + "ffn_up.weight", ffn, dim);
    L.w_down = Matrix(f, p + "ffn_down.weight", dim, ffn);
    w.layers.push_back(std::move(L));
  }
  std::vector<int32_t> eos;
  if (f.Has("tokenizer.ggml.eos_token_id")) eos.push_back(static_cast<int32_t>(f.GetInt("tokenizer.ggml.eos_token_id")));
  if (f.Has("tokenizer.ggml.eot_token_id")) eos.push_back(static_cast<int32_t>(f.GetInt("tokenizer.ggml.eot_token_id")));
  auto model = std::make_unique<LlamaModel>(std::move(spec), std::move(w), std::move(eos));
  model->Prepare(backend);
  return model;
}

}  // namespace pagoda
