#include "model/arch/deepseek.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/rope.h"
#include "model/weight_views.h"

namespace pagoda {
double MlaSoftmaxScale(const ModelSpec& spec) {
  double scale =
      1.0 / std::sqrt(static_cast<double>(spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim));
  if (spec.rope.scaling == RopeScaling::kYarn && spec.rope.mscale_all_dim > 0.0) {
    const double mscale = YarnMscale(spec.rope.factor, spec.rope.mscale_all_dim);
    scale *= mscale * mscale;
  }
  return scale;
}

DeepseekModel::DeepseekModel(ModelSpec spec, DeepseekWeights weights, std::vector<int32_t> eos_ids)
    : spec_(std::move(spec)), w_(std::move(weights)), eos_ids_(std::move(eos_ids)) {
  spec_.Validate();
  PAGODA_ENSURE(spec_.is_mla(), ErrorCode::kInvalidArgument,
                spec_.name << ": DeepseekModel needs MLA");
  const MlaSpec& m = spec_.mla;
  rope_ = MakeRopeParams(spec_.rope);
  softmax_scale_ = static_cast<float>(MlaSoftmaxScale(spec_));

  // W_UK[h] is rows [h*(d_n+d_v), h*(d_n+d_v)+d_n) of kv_b_proj, [d_n, r]; the absorbed query
  // needs its transpose [r, d_n] as a MatMul weight. An exact copy in the same dtype.
  const int64_t r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dv = m.v_head_dim,
                heads = spec_.num_heads;
  w_uk_t_.resize(spec_.num_layers);
  w_uk_t_storage_.resize(spec_.num_layers);
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    const WeightMatrix& kvb = w_.layers[l].wkv_b;
    PAGODA_ENSURE(kvb.dtype == DType::kF32 || kvb.dtype == DType::kBF16 || kvb.dtype == DType::kF16,
                  ErrorCode::kUnsupported,
                  spec_.name << ": kv_b_proj of layer " << l << " is " << DTypeName(kvb.dtype)
                             << "; MLA's absorbed form needs f32, f16 or bf16");
    const int64_t es = DTypeBlockBytes(kvb.dtype);
    auto& buf = w_uk_t_storage_[l];
    buf.resize(heads * r * dn * es);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < dn; ++i) {
        const uint8_t* src = kvb.row(h * (dn + dv) + i);
        for (int64_t c = 0; c < r; ++c) {
          std::memcpy(&buf[((h * r + c) * dn + i) * es], src + c * es, es);
        }
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      WeightMatrix wm;
      wm.dtype = kvb.dtype;
      wm.data = &buf[h * r * dn * es];
      wm.rows = r;
      wm.cols = dn;
      wm.row_bytes = dn * es;
      w_uk_t_[l].push_back(wm);
    }
  }
}

KVStorageShape DeepseekModel::KVShapeFor(int64_t num_blocks, int64_t block_size,
                                         DType dtype) const {
  KVStorageShape s;
  s.num_layers = spec_.num_layers;
  s.num_blocks = num_blocks;
  s.block_size = block_size;
  s.num_kv_heads = 1;
  s.head_dim = spec_.mla.kv_lora_rank;
  s.head_dim_v = spec_.mla.qk_rope_head_dim;
  s.dtype = dtype;
  return s;
}

int64_t DeepseekModel::WeightBytesPerToken() const {
  auto bytes = [](const WeightMatrix& m) { return m.rows * m.row_bytes; };
  auto mlp = [&](const SwiGluWeights& w) { return bytes(w.gate) + bytes(w.up) + bytes(w.down); };
  int64_t total = bytes(w_.output);
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    const DeepseekLayerWeights& L = w_.layers[l];
    total +=
        bytes(L.wq) + bytes(L.wq_a) + bytes(L.wq_b) + bytes(L.wkv_a) + bytes(L.wkv_b) + bytes(L.wo);
    if (is_moe_layer(l)) {
      total += bytes(L.moe.router) + mlp(L.moe.shared);
      // Each token reads num_experts_per_tok experts (all the same size).
      if (!L.moe.experts.empty()) total += spec_.moe.num_experts_per_tok * mlp(L.moe.experts[0]);
    } else {
      total += mlp(L.mlp);
    }
  }
  return total;
}

void DeepseekModel::PrepareWeights(Backend& backend) {
  constexpr WeightLayout kRows = WeightLayout::kRowMajor;  // see deepseek.h
  auto weight = [&](const WeightMatrix& w) { return w.rows > 0 ? backend.PrepareWeight(w, kRows) : Weight{}; };
  auto vec = [&](const std::vector<float>& v) { return v.empty() ? PreparedVector{} : backend.PrepareVector(v); };
  const MlaSpec& m = spec_.mla;
  const int64_t dn = m.qk_nope_head_dim, dv = m.v_head_dim;
  layers_.resize(spec_.num_layers);
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    const DeepseekLayerWeights& L = w_.layers[l];
    Layer& P = layers_[l];
    P.attn_norm = vec(L.attn_norm);
    P.ffn_norm = vec(L.ffn_norm);
    P.q_a_norm = vec(L.q_a_norm);
    P.kv_a_norm = vec(L.kv_a_norm);
    P.wq = weight(L.wq);
    P.wq_a = weight(L.wq_a);
    P.wq_b = weight(L.wq_b);
    P.wkv_a = weight(L.wkv_a);
    P.wo = weight(L.wo);
    for (int64_t h = 0; h < spec_.num_heads; ++h) {
      P.w_uk_t.push_back(weight(w_uk_t_[l][h]));
      // W_UV[h]: head h's value rows of kv_b_proj, in place.
      WeightMatrix w_uv = L.wkv_b;
      w_uv.data = L.wkv_b.row(h * (dn + dv) + dn);
      w_uv.rows = dv;
      P.w_uv.push_back(weight(w_uv));
    }
    if (is_moe_layer(l)) {
      P.moe = PrepareMoeLayer(backend, L.moe, kRows);
    } else {
      P.mlp_gate = weight(L.mlp.gate);
      P.mlp_up = weight(L.mlp.up);
      P.mlp_down = weight(L.mlp.down);
    }
  }
  embedding_ = weight(w_.embedding);
  output_ = weight(w_.output);
  final_norm_ = vec(w_.final_norm);
}

DeepseekModel::Buffers DeepseekModel::Views(int64_t n, int64_t m) {
  Backend& b = backend();
  const MlaSpec& s = spec_.mla;
  const int64_t dim = spec_.dim, heads = spec_.num_heads;
  const int64_t r = s.kv_lora_rank, dn = s.qk_nope_head_dim, dr = s.qk_rope_head_dim, dv = s.v_head_dim;
  int64_t ffn = 0;  // the widest dense SwiGLU (MoE experts use the backend's own scratch)
  for (const Layer& L : layers_) ffn = std::max(ffn, L.mlp_gate.rows);
  enum Slot { kX, kH, kY, kQ, kQa, kKv, kCkv, kKpe, kQabs, kCol, kLat, kOlat, kO, kVh, kGate, kUp, kSel };
  Buffers v;
  v.x = ws_.Get(b, kX, n, dim);
  v.h = ws_.Get(b, kH, n, dim);
  v.y = ws_.Get(b, kY, n, dim);
  v.q = ws_.Get(b, kQ, n, heads * (dn + dr));
  v.qa = ws_.Get(b, kQa, s.q_lora_rank > 0 ? n : 0, s.q_lora_rank);
  v.kv = ws_.Get(b, kKv, n, r + dr);
  v.c_kv = ws_.Get(b, kCkv, n, r);
  v.k_pe = ws_.Get(b, kKpe, n, dr);
  v.q_abs = ws_.Get(b, kQabs, n, heads * (r + dr));
  v.col = ws_.Get(b, kCol, n, std::max(dn, r));
  v.lat = ws_.Get(b, kLat, n, r);
  v.o_lat = ws_.Get(b, kOlat, n, heads * r);
  v.o = ws_.Get(b, kO, n, heads * dv);
  v.vh = ws_.Get(b, kVh, n, dv);
  v.gate = ws_.Get(b, kGate, n, ffn);
  v.up = ws_.Get(b, kUp, n, ffn);
  v.sel = ws_.Get(b, kSel, m, dim);
  return v;
}

std::unique_ptr<Model> DeepseekModel::Shard(int rank, int size, Backend& backend) const {
  CheckShardRank(rank, size);
  const MlaSpec& m = spec_.mla;
  const int64_t heads = spec_.num_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim, dv = m.v_head_dim;
  auto divides = [&](int64_t n, const char* what) { RequireShardDivides(n, size, what, spec_.name); };
  divides(heads, "attention heads");
  for (const DeepseekLayerWeights& L : w_.layers) {
    if (!L.mlp.empty()) divides(L.mlp.gate.rows, "dense MLP width");
  }
  if (spec_.moe.num_experts > 0) divides(spec_.moe.expert_ffn_dim, "expert MLP width");
  if (!w_.layers.empty() && !w_.layers[0].moe.shared.empty()) divides(w_.layers[0].moe.shared.gate.rows, "shared-expert width");
  const int64_t h0 = rank * (heads / size), hn = heads / size;
  ModelSpec s = spec_;
  s.num_heads = hn;
  if (s.ffn_dim > 0) s.ffn_dim /= size;
  s.moe.expert_ffn_dim /= size;
  DeepseekWeights w;
  w.embedding = w_.embedding;
  w.output = w_.output;
  w.final_norm = w_.final_norm;
  w.keep_alive = w_.keep_alive;
  auto split_mlp = [&](const SwiGluWeights& in) {
    SwiGluWeights out;
    if (in.empty()) return out;
    const int64_t per = in.gate.rows / size;
    out.gate = RowSlice(in.gate, rank * per, per);
    out.up = RowSlice(in.up, rank * per, per);
    out.down = ColSlice(in.down, rank * per, per, &w.keep_alive);
    return out;
  };
  for (const DeepseekLayerWeights& L : w_.layers) {
    DeepseekLayerWeights S;
    S.attn_norm = L.attn_norm;
    S.ffn_norm = L.ffn_norm;
    // Query rows are per head, d_n + d_r each (after q_a when the model has a q LoRA).
    if (L.wq.rows > 0) S.wq = RowSlice(L.wq, h0 * (dn + dr), hn * (dn + dr));
    S.wq_a = L.wq_a;
    S.q_a_norm = L.q_a_norm;
    if (L.wq_b.rows > 0) S.wq_b = RowSlice(L.wq_b, h0 * (dn + dr), hn * (dn + dr));
    S.wkv_a = L.wkv_a;
    S.kv_a_norm = L.kv_a_norm;
    S.wkv_b = RowSlice(L.wkv_b, h0 * (dn + dv), hn * (dn + dv));
    S.wo = ColSlice(L.wo, h0 * dv, hn * dv, &w.keep_alive);
    S.mlp = split_mlp(L.mlp);
    S.moe.router = L.moe.router;
    S.moe.score_bias = L.moe.score_bias;
    for (const SwiGluWeights& e : L.moe.experts) S.moe.experts.push_back(split_mlp(e));
    S.moe.shared = split_mlp(L.moe.shared);
    w.layers.push_back(std::move(S));
  }
  auto shard = std::make_unique<DeepseekModel>(std::move(s), std::move(w), eos_ids_);
  shard->tp_size_ = size;
  shard->Prepare(backend);
  return shard;
}

void DeepseekModel::ReserveWorkspace(int64_t max_tokens, int64_t max_logits) {
  Views(max_tokens, max_logits);
  backend().ReserveScratch(max_tokens, max_logits);
}

void DeepseekModel::Attention(int64_t l, Backend& backend, KVCache& cache, const Buffers& B) {
  const Layer& L = layers_[l];
  const MlaSpec& m = spec_.mla;
  const int64_t n = B.x.rows, heads = spec_.num_heads;
  const int64_t r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                dv = m.v_head_dim;
  const int64_t dq = dn + dr, dabs = r + dr;

  if (m.q_lora_rank > 0) {
    backend.MatMul(L.wq_a, B.h, B.qa);
    backend.RmsNorm(B.qa, L.q_a_norm.view, spec_.norm_eps, B.qa);
    backend.MatMul(L.wq_b, B.qa, B.q);
  } else {
    backend.MatMul(L.wq, B.h, B.q);
  }
  backend.MatMul(L.wkv_a, B.h, B.kv);
  backend.Copy(B.kv.ColRange(0, r), B.c_kv);
  backend.Copy(B.kv.ColRange(r, dr), B.k_pe);
  backend.RmsNorm(B.c_kv, L.kv_a_norm.view, spec_.norm_eps, B.c_kv);
  backend.Rope(rope_, B.q, heads, dq, dn);
  backend.Rope(rope_, B.k_pe, 1, dr, 0);
  // c_kv and k_pe go to the cache in its format (quantized latents: kv/kv_codec.h).
  backend.WriteKV(cache, l, B.c_kv, B.k_pe);

  // Absorbed query [n, H, r + d_r] = [W_UK^T q_nope | q_pe].
  const TensorView col_n = B.col.As(n, dn), col_r = B.col.As(n, dr);
  for (int64_t h = 0; h < heads; ++h) {
    backend.Copy(B.q.ColRange(h * dq, dn), col_n);
    backend.MatMul(L.w_uk_t[h], col_n, B.lat);
    backend.Copy(B.lat, B.q_abs.ColRange(h * dabs, r));
    backend.Copy(B.q.ColRange(h * dq + dn, dr), col_r);
    backend.Copy(col_r, B.q_abs.ColRange(h * dabs + r, dr));
  }

  backend.MlaAttention(cache, l, heads, softmax_scale_, B.q_abs, B.o_lat);

  // o[h] = W_UV[h] o_lat[h].
  for (int64_t h = 0; h < heads; ++h) {
    backend.Copy(B.o_lat.ColRange(h * r, r), B.lat);
    backend.MatMul(L.w_uv[h], B.lat, B.vh);
    backend.Copy(B.vh, B.o.ColRange(h * dv, dv));
  }
  backend.MatMul(L.wo, B.o, B.y);
}

void DeepseekModel::Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
                            const ForwardObserver* observer) {
  CheckBackend(backend);
  const int64_t n = step.num_tokens(), num_logits = step.num_logits();
  const int64_t dim = spec_.dim;
  const KVStorageShape& cs = cache.shape();
  PAGODA_CHECK(cs.num_kv_heads == 1 && cs.head_dim == spec_.mla.kv_lora_rank &&
               cs.head_dim_v == spec_.mla.qk_rope_head_dim && cs.num_layers == spec_.num_layers)
      << "KV cache shape does not match the MLA model (use KVShapeFor)";
  const Buffers B = Views(n, num_logits);
  backend.BeginStep(step, cache);
  backend.Embedding(embedding_, B.x);

  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (observer && observer->on_hidden) observer->on_hidden(l, B.x.f32(), n, dim);
    const Layer& L = layers_[l];
    backend.RmsNorm(B.x, L.attn_norm.view, spec_.norm_eps, B.h);
    Attention(l, backend, cache, B);
    if (tp_size_ > 1) backend.AllReduce(B.y);  // this rank's heads' share of o_proj
    backend.Add(B.y, B.x);

    backend.RmsNorm(B.x, L.ffn_norm.view, spec_.norm_eps, B.h);
    if (is_moe_layer(l)) {
      backend.Moe(spec_.moe, L.moe, B.h, B.y);
    } else {
      const TensorView gate = B.gate.As(n, L.mlp_gate.rows), up = B.up.As(n, L.mlp_up.rows);
      backend.MatMul(L.mlp_gate, B.h, gate);
      backend.MatMul(L.mlp_up, B.h, up);
      backend.SiluMul(gate, up, gate);
      backend.MatMul(L.mlp_down, gate, B.y);
    }
    if (tp_size_ > 1) backend.AllReduce(B.y);  // this rank's slice of the MLP / of every expert
    backend.Add(B.y, B.x);
  }

  backend.RmsNorm(B.x, final_norm_.view, spec_.norm_eps, B.x);
  if (observer && observer->on_hidden) observer->on_hidden(spec_.num_layers, B.x.f32(), n, dim);
  if (num_logits == 0) return;
  backend.GatherLogitRows(B.x, B.sel);
  backend.MatMul(output_, B.sel, logits);
}

}  // namespace pagoda
