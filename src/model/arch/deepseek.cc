#include "model/arch/deepseek.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "model/rope.h"

namespace pagoda {
namespace {

// Copies columns [col0, col0 + width) of rows [n, stride] into dst [n, width].
void GatherColumns(const float* src, int64_t n, int64_t stride, int64_t col0, int64_t width,
                   float* dst) {
  for (int64_t t = 0; t < n; ++t) std::copy_n(src + t * stride + col0, width, dst + t * width);
}

void ScatterColumns(const float* src, int64_t n, int64_t stride, int64_t col0, int64_t width,
                    float* dst) {
  for (int64_t t = 0; t < n; ++t) std::copy_n(src + t * width, width, dst + t * stride + col0);
}

}  // namespace

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

void DeepseekModel::Attention(int64_t l, const ForwardBatch& batch, KVStorage& cache,
                              const float* x, float* out) {
  const DeepseekLayerWeights& L = w_.layers[l];
  const MlaSpec& m = spec_.mla;
  const int64_t n = batch.num_tokens(), heads = spec_.num_heads;
  const int64_t r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                dv = m.v_head_dim;
  const int64_t dq = dn + dr, dabs = r + dr;

  std::vector<float> q(n * heads * dq);
  if (m.q_lora_rank > 0) {
    std::vector<float> qa(n * m.q_lora_rank);
    MatMul(L.wq_a, x, n, qa.data());
    RmsNorm(qa.data(), L.q_a_norm.data(), n, m.q_lora_rank, spec_.norm_eps, qa.data());
    MatMul(L.wq_b, qa.data(), n, q.data());
  } else {
    MatMul(L.wq, x, n, q.data());
  }
  std::vector<float> kv(n * (r + dr)), c_kv(n * r), k_pe(n * dr);
  MatMul(L.wkv_a, x, n, kv.data());
  GatherColumns(kv.data(), n, r + dr, 0, r, c_kv.data());
  GatherColumns(kv.data(), n, r + dr, r, dr, k_pe.data());
  RmsNorm(c_kv.data(), L.kv_a_norm.data(), n, r, spec_.norm_eps, c_kv.data());
  ApplyRope(rope_, batch.positions.data(), n, heads, dq, dn, q.data());
  ApplyRope(rope_, batch.positions.data(), n, 1, dr, 0, k_pe.data());
  // c_kv and k_pe go to the cache in its format (quantized latents: kernels/cpu/kv_quant.h).
  cache.Write(l, c_kv.data(), k_pe.data(), batch.slot_mapping.data(), n, batch.positions.data());

  // Absorbed query [n, H, r + d_r] = [W_UK^T q_nope | q_pe].
  std::vector<float> q_abs(n * heads * dabs), col(n * std::max(dn, r)), lat(n * r);
  for (int64_t h = 0; h < heads; ++h) {
    GatherColumns(q.data(), n, heads * dq, h * dq, dn, col.data());
    MatMul(w_uk_t_[l][h], col.data(), n, lat.data());
    ScatterColumns(lat.data(), n, heads * dabs, h * dabs, r, q_abs.data());
    GatherColumns(q.data(), n, heads * dq, h * dq + dn, dr, col.data());
    ScatterColumns(col.data(), n, heads * dabs, h * dabs + r, dr, q_abs.data());
  }

  std::vector<float> o_lat(n * heads * r);
  MlaAttentionParams p;
  p.q = q_abs.data();
  p.out = o_lat.data();
  p.num_tokens = n;
  p.num_heads = heads;
  p.kv_lora_rank = r;
  p.rope_dim = dr;
  cache.FillMlaAttentionParams(l, &p);  // caches, dtype, block size and formats
  p.positions = batch.positions.data();
  p.block_tables = batch.block_tables.data();
  p.scale = softmax_scale_;
  MlaAttention(p);

  // o[h] = W_UV[h] o_lat[h]: head h's value rows of kv_b_proj, used in place.
  std::vector<float> o(n * heads * dv), vh(n * dv);
  for (int64_t h = 0; h < heads; ++h) {
    WeightMatrix w_uv = L.wkv_b;
    w_uv.data = L.wkv_b.row(h * (dn + dv) + dn);
    w_uv.rows = dv;
    GatherColumns(o_lat.data(), n, heads * r, h * r, r, lat.data());
    MatMul(w_uv, lat.data(), n, vh.data());
    ScatterColumns(vh.data(), n, heads * dv, h * dv, dv, o.data());
  }
  MatMul(L.wo, o.data(), n, out);
}

void DeepseekModel::Forward(const ForwardBatch& batch, KVStorage& cache, float* logits,
                            const ForwardObserver* observer) {
  const int64_t n = batch.num_tokens();
  const int64_t dim = spec_.dim;
  PAGODA_CHECK(static_cast<int64_t>(batch.positions.size()) == n &&
               static_cast<int64_t>(batch.slot_mapping.size()) == n &&
               static_cast<int64_t>(batch.block_tables.size()) == n)
      << "inconsistent batch";
  const KVStorageShape& cs = cache.shape();
  PAGODA_CHECK(cs.num_kv_heads == 1 && cs.head_dim == spec_.mla.kv_lora_rank &&
               cs.head_dim_v == spec_.mla.qk_rope_head_dim && cs.num_layers == spec_.num_layers)
      << "KV cache shape does not match the MLA model (use KVShapeFor)";

  std::vector<float> x(n * dim), h(n * dim), y(n * dim);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t id = batch.token_ids[t];
    PAGODA_ENSURE(
        id >= 0 && id < spec_.vocab_size, ErrorCode::kInvalidArgument,
        "token id " << id << " is outside the vocabulary (size " << spec_.vocab_size << ")");
    DequantizeRow(w_.embedding.dtype, w_.embedding.row(id), &x[t * dim], dim);
  }

  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (observer && observer->on_hidden) observer->on_hidden(l, x.data(), n, dim);
    const DeepseekLayerWeights& L = w_.layers[l];
    RmsNorm(x.data(), L.attn_norm.data(), n, dim, spec_.norm_eps, h.data());
    Attention(l, batch, cache, h.data(), y.data());
    for (int64_t i = 0; i < n * dim; ++i) x[i] += y[i];

    RmsNorm(x.data(), L.ffn_norm.data(), n, dim, spec_.norm_eps, h.data());
    if (is_moe_layer(l)) {
      MoeForward(spec_.moe, L.moe, h.data(), n, dim, y.data());
    } else {
      SwiGlu(L.mlp, h.data(), n, y.data());
    }
    for (int64_t i = 0; i < n * dim; ++i) x[i] += y[i];
  }

  RmsNorm(x.data(), w_.final_norm.data(), n, dim, spec_.norm_eps, x.data());
  if (observer && observer->on_hidden) observer->on_hidden(spec_.num_layers, x.data(), n, dim);
  const int64_t num_logits = static_cast<int64_t>(batch.logits_indices.size());
  if (num_logits == 0) return;
  std::vector<float> sel(num_logits * dim);
  for (int64_t i = 0; i < num_logits; ++i) {
    const int32_t t = batch.logits_indices[i];
    PAGODA_CHECK(t >= 0 && t < n) << "logits index " << t;
    std::copy_n(&x[t * dim], dim, &sel[i * dim]);
  }
  MatMul(w_.output, sel.data(), num_logits, logits);
}

}  // namespace pagoda
