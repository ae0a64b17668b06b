#include "model/llama2c_loader.h"

#include "io/llama2c_file.h"
#include "model/arch/llama.h"
#include "model/spec_loader.h"
#include "model/weight_views.h"

namespace pagoda {

std::unique_ptr<Model> LoadLlama2cModel(const std::string& path, Backend& backend) {
  auto file = std::make_shared<Llama2cFile>(path);
  const Llama2cFile& f = *file;
  ModelSpec spec = LoadModelSpec(path);
  const int64_t dim = spec.dim, ffn = spec.ffn_dim;
  const int64_t q_dim = spec.num_heads * spec.head_dim, kv_dim = spec.num_kv_heads * spec.head_dim;
  auto view = [&](const float* p, int64_t rows, int64_t cols, const char* what) {
    return MakeWeightView(DType::kF32, p, rows * cols, rows, cols, path + ": " + what);
  };
  auto vec = [&](const float* p, int64_t n) { return std::vector<float>(p, p + n); };
  LlamaWeights w;
  w.keep_alive.push_back(file);
  w.embedding = view(f.token_embedding(), spec.vocab_size, dim, "token_embedding");
  w.output = view(f.classifier(), spec.vocab_size, dim, "wcls");
  w.final_norm = vec(f.rms_final(), dim);
  for (int l = 0; l < spec.num_layers; ++l) {
    LlamaLayerWeights L;
    L.attn_norm = vec(f.rms_att(l), dim);
    L.ffn_norm = vec(f.rms_ffn(l), dim);
    L.wq = view(f.wq(l), q_dim, dim, "wq");
    L.wk = view(f.wk(l), kv_dim, dim, "wk");
    L.wv = view(f.wv(l), kv_dim, dim, "wv");
    L.wo = view(f.wo(l), dim, q_dim, "wo");
    L.w_gate = view(f.w1(l), ffn, dim, "w1");
    L.w_down = view(f.w2(l), dim, ffn, "w2");
    L.w_up = view(f.w3(l), ffn, dim, "w3");
    w.layers.push_back(std::move(L));
  }
  auto model = std::make_unique<LlamaModel>(std::move(spec), std::move(w), std::vector<int32_t>{});
  model->Prepare(backend);
  return model;
}

}  // namespace pagoda
