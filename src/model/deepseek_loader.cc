#include "model/deepseek_loader.h"

#include <utility>

#include "core/error.h"
#include "model/arch/deepseek.h"
#include "model/hf_checkpoint.h"
#include "model/hf_loader.h"
#include "model/weight_views.h"

namespace pagoda {
namespace {

class Reader {
 public:
  explicit Reader(const HfCheckpoint& c) : c_(c) {}

  WeightMatrix Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const SafetensorsTensor& t = c_.Get(name);
    const std::string what = c_.FileOf(name) + ": tensor '" + name + "'";
    PAGODA_ENSURE(t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols,
                  ErrorCode::kCorruptData,
                  what << " has shape " << ShapeString(t.shape) << ", expected [" << rows << ", "
                       << cols << "]");
    return MakeWeightView(WeightDTypeOf(t, what), t.data, t.num_elements, rows, cols, what);
  }

  std::vector<float> Vector(const std::string& name, int64_t n) const {
    const SafetensorsTensor& t = c_.Get(name);
    const std::string what = c_.FileOf(name) + ": tensor '" + name + "'";
    PAGODA_ENSURE(t.shape.size() == 1 && t.shape[0] == n, ErrorCode::kCorruptData,
                  what << " has shape " << ShapeString(t.shape) << ", expected [" << n << "]");
    return ToF32(WeightDTypeOf(t, what), t.data, t.num_elements, n, what);
  }

  SwiGluWeights Mlp(const std::string& prefix, int64_t dim, int64_t ffn) const {
    SwiGluWeights w;
    w.gate = Matrix(prefix + ".gate_proj.weight", ffn, dim);
    w.up = Matrix(prefix + ".up_proj.weight", ffn, dim);
    w.down = Matrix(prefix + ".down_proj.weight", dim, ffn);
    return w;
  }

  bool Has(const std::string& name) const { return c_.Find(name) != nullptr; }

 private:
  static std::string ShapeString(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
  const HfCheckpoint& c_;
};

}  // namespace

std::unique_ptr<Model> LoadDeepseekHfModel(const std::string& dir, ModelSpec spec, Backend& backend) {
  PAGODA_ENSURE(spec.is_mla() && spec.architecture.starts_with("deepseek"), ErrorCode::kUnsupported,
                dir << ": architecture '" << spec.architecture << "' is not DeepSeek MLA");
  const HfCheckpoint ckpt(dir);
  const Reader rd(ckpt);
  const MlaSpec& m = spec.mla;
  const int64_t dim = spec.dim, heads = spec.num_heads;
  const int64_t dq = m.qk_nope_head_dim + m.qk_rope_head_dim;

  DeepseekWeights w;
  w.embedding = rd.Matrix("model.embed_tokens.weight", spec.vocab_size, dim);
  w.output = spec.tied_embeddings && !rd.Has("lm_head.weight")
                 ? w.embedding
                 : rd.Matrix("lm_head.weight", spec.vocab_size, dim);
  w.final_norm = rd.Vector("model.norm.weight", dim);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const std::string a = p + ".self_attn";
    DeepseekLayerWeights L;
    L.attn_norm = rd.Vector(p + ".input_layernorm.weight", dim);
    L.ffn_norm = rd.Vector(p + ".post_attention_layernorm.weight", dim);
    if (m.q_lora_rank > 0) {
      L.wq_a = rd.Matrix(a + ".q_a_proj.weight", m.q_lora_rank, dim);
      L.q_a_norm = rd.Vector(a + ".q_a_layernorm.weight", m.q_lora_rank);
      L.wq_b = rd.Matrix(a + ".q_b_proj.weight", heads * dq, m.q_lora_rank);
    } else {
      L.wq = rd.Matrix(a + ".q_proj.weight", heads * dq, dim);
    }
    L.wkv_a = rd.Matrix(a + ".kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim, dim);
    L.kv_a_norm = rd.Vector(a + ".kv_a_layernorm.weight", m.kv_lora_rank);
    L.wkv_b = rd.Matrix(a + ".kv_b_proj.weight", heads * (m.qk_nope_head_dim + m.v_head_dim),
                        m.kv_lora_rank);
    L.wo = rd.Matrix(a + ".o_proj.weight", dim, heads * m.v_head_dim);
    const MoeSpec& e = spec.moe;
    if (e.num_experts > 0 && l >= e.first_k_dense_replace) {
      L.moe.router = rd.Matrix(p + ".mlp.gate.weight", e.num_experts, dim);
      const std::string bias = p + ".mlp.gate.e_score_correction_bias";
      if (rd.Has(bias)) {
        L.moe.score_bias = rd.Vector(bias, e.num_experts);
      } else {
        PAGODA_ENSURE(e.topk_method != "noaux_tc", ErrorCode::kNotFound,
                      dir << ": tensor '" << bias << "' not found (topk_method noaux_tc needs it)");
      }
      for (int64_t k = 0; k < e.num_experts; ++k) {
        L.moe.experts.push_back(
            rd.Mlp(p + ".mlp.experts." + std::to_string(k), dim, e.expert_ffn_dim));
      }
      if (e.num_shared_experts > 0) {
        L.moe.shared =
            rd.Mlp(p + ".mlp.shared_experts", dim, e.expert_ffn_dim * e.num_shared_experts);
      }
    } else {
      L.mlp = rd.Mlp(p + ".mlp", dim, spec.ffn_dim);
    }
    w.layers.push_back(std::move(L));
  }
  w.keep_alive = ckpt.files();
  auto model = std::make_unique<DeepseekModel>(std::move(spec), std::move(w), ReadHfEosIds(dir));
  model->Prepare(backend);
  return model;
}

}  // namespace pagoda
