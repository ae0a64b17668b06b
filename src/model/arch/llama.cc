#include "model/arch/llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "model/rope.h"

namespace pagoda {
namespace {

void AddBias(const std::vector<float>& bias, int64_t num_tokens, float* x) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) x[t * n + i] += bias[i];
  }
}

}  // namespace

LlamaModel::LlamaModel(ModelSpec spec, LlamaWeights weights, std::vector<int32_t> eos_ids)
    : spec_(std::move(spec)), w_(std::move(weights)), eos_ids_(std::move(eos_ids)) {
  spec_.Validate();
  rope_ = MakeRopeParams(spec_.rope);
  PackForCpu();
}

void LlamaModel::PackForCpu() {
  const auto start = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  auto keep = [&](std::shared_ptr<const PackedWeights> p) {
    bytes += p->bytes();
    packed_.push_back(std::move(p));
    return packed_.back().get();
  };
  auto pack = [&](WeightMatrix& m) {
    if (std::shared_ptr<const PackedWeights> p = PackWeightsForCpu(m)) m.packed = keep(std::move(p));
  };
  // Stacked q|k|v and gate|up when possible, else each matrix on its own.
  auto stack = [&](std::vector<WeightMatrix*> parts, WeightMatrix* fused, StackOrder order) {
    std::vector<WeightMatrix> views;
    for (WeightMatrix* m : parts) views.push_back(*m);
    if (std::shared_ptr<const PackedWeights> p = PackStackedForCpu(views, order)) {
      *fused = PackedOnlyView(*keep(std::move(p)));
      return;
    }
    for (WeightMatrix* m : parts) pack(*m);
  };
  fused_.resize(w_.layers.size());
  int64_t stacked = 0;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    LlamaLayerWeights& L = w_.layers[l];
    stack({&L.wq, &L.wk, &L.wv}, &fused_[l].qkv, StackOrder::kConcat);
    // gate and up 16 rows at a time: the MatMul applies silu(gate) * up per work item.
    stack({&L.w_gate, &L.w_up}, &fused_[l].gate_up, StackOrder::kPairs16);
    stacked += (fused_[l].qkv.rows > 0) + (fused_[l].gate_up.rows > 0);
    pack(L.wo);
    pack(L.w_down);
  }
  pack(w_.output);
  if (packed_.empty()) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PAGODA_LOG(kInfo) << "packed " << packed_.size() << " weight matrices (" << stacked
                    << " of them stacked q|k|v or gate|up) into row panels for the " << MatMulIsaName()
                    << " kernels (" << bytes / (1 << 20) << " MiB, " << s << " s)";
}

KVStorageShape LlamaModel::KVShapeFor(int64_t num_blocks, int64_t block_size, DType dtype) const {
  KVStorageShape s;
  s.num_layers = spec_.num_layers;
  s.num_blocks = num_blocks;
  s.block_size = block_size;
  s.num_kv_heads = spec_.num_kv_heads;
  s.head_dim = spec_.head_dim;
  s.dtype = dtype;
  return s;
}

int64_t LlamaModel::WeightBytesPerToken() const {
  auto bytes = [](const WeightMatrix& m) { return m.rows * m.row_bytes; };
  int64_t total = bytes(w_.output);
  for (const auto& l : w_.layers) {
    total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.w_gate) +
             bytes(l.w_up) + bytes(l.w_down);
  }
  return total;
}

void LlamaModel::Forward(const ForwardBatch& batch, KVStorage& cache, float* logits,
                         const ForwardObserver* observer) {
  const int64_t n = batch.num_tokens();
  const int64_t dim = spec_.dim, hd = spec_.head_dim;
  const int64_t q_dim = spec_.num_heads * hd, kv_dim = spec_.num_kv_heads * hd;
  const int64_t ffn = spec_.ffn_dim;
  PAGODA_CHECK(static_cast<int64_t>(batch.positions.size()) == n &&
               static_cast<int64_t>(batch.slot_mapping.size()) == n &&
               static_cast<int64_t>(batch.block_tables.size()) == n)
      << "inconsistent batch";

  // Every buffer is written before it is read, so stale contents never matter.
  auto buffer = [](std::vector<float>& b, int64_t size) {
    if (static_cast<int64_t>(b.size()) < size) b.resize(size);
    return std::span<float>(b.data(), size);
  };
  // Any layer may be stacked (a mixed-type file can stack some layers and not others).
  const bool stacked = std::any_of(fused_.begin(), fused_.end(), [](const FusedProjections& f) {
    return f.qkv.rows > 0 || f.gate_up.rows > 0;
  });
  const std::span<float> x = buffer(ws_.x, n * dim), h = buffer(ws_.h, n * dim), q = buffer(ws_.q, n * q_dim),
                         k = buffer(ws_.k, n * kv_dim), v = buffer(ws_.v, n * kv_dim),
                         attn = buffer(ws_.attn, n * q_dim), gate = buffer(ws_.gate, n * ffn),
                         fused = buffer(ws_.fused, stacked ? n * std::max(q_dim + 2 * kv_dim, 2 * ffn) : 0);

  for (int64_t t = 0; t < n; ++t) {
    const int32_t id = batch.token_ids[t];
    PAGODA_ENSURE(id >= 0 && id < spec_.vocab_size, ErrorCode::kInvalidArgument,
                  "token id " << id << " is outside the vocabulary (size " << spec_.vocab_size << ")");
    DequantizeRow(w_.embedding.dtype, w_.embedding.row(id), &x[t * dim], dim);
  }

  PagedAttentionParams ap;
  ap.num_tokens = n;
  ap.num_heads = spec_.num_heads;
  ap.num_kv_heads = spec_.num_kv_heads;
  ap.head_dim = hd;
  ap.block_size = cache.shape().block_size;
  ap.positions = batch.positions.data();
  ap.block_tables = batch.block_tables.data();
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  ap.sliding_window = spec_.sliding_window;
  ap.q = q.data();
  ap.out = attn.data();

  const RopeTable rope_table = MakeRopeTable(rope_, batch.positions.data(), n);
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (observer && observer->on_hidden) observer->on_hidden(l, x.data(), n, dim);
    const LlamaLayerWeights& L = w_.layers[l];
    const FusedProjections& F = fused_[l];
    RmsNorm(x.data(), L.attn_norm.data(), n, dim, spec_.norm_eps, h.data());
    if (F.qkv.rows > 0) {  // one stacked MatMul, then q | k | v split per token
      const int64_t width = q_dim + 2 * kv_dim;
      MatMul(F.qkv, h.data(), n, fused.data());
      ParallelFor(n, 64, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* src = fused.data() + t * width;
          std::copy_n(src, q_dim, q.data() + t * q_dim);
          std::copy_n(src + q_dim, kv_dim, k.data() + t * kv_dim);
          std::copy_n(src + q_dim + kv_dim, kv_dim, v.data() + t * kv_dim);
        }
      });
    } else {
      MatMul(L.wq, h.data(), n, q.data());
      MatMul(L.wk, h.data(), n, k.data());
      MatMul(L.wv, h.data(), n, v.data());
    }
    AddBias(L.bq, n, q.data());
    AddBias(L.bk, n, k.data());
    AddBias(L.bv, n, v.data());
    ApplyRope(rope_, rope_table, n, spec_.num_heads, hd, 0, q.data());
    ApplyRope(rope_, rope_table, n, spec_.num_kv_heads, hd, 0, k.data());
    cache.Write(l, k.data(), v.data(), batch.slot_mapping.data(), n, batch.positions.data());
    cache.ObserveQueries(l, q.data(), spec_.num_heads, batch.slot_mapping.data(), n, ap.scale);
    cache.FillAttentionParams(l, &ap);
    PagedAttention(ap);
    // The residual adds and silu(gate) * up run inside the MatMul, on each work item's block
    // while it is in cache (the same bits as the separate kernels).
    MatMul(L.wo, attn.data(), n, h.data(), {MatMulEpilogue::Kind::kAddTo, x.data()});

    RmsNorm(x.data(), L.ffn_norm.data(), n, dim, spec_.norm_eps, h.data());
    if (F.gate_up.rows > 0) {
      MatMul(F.gate_up, h.data(), n, fused.data(), {MatMulEpilogue::Kind::kSiluMulPairs, gate.data()});
    } else {
      const std::span<float> up = buffer(ws_.up, n * ffn);
      MatMul(L.w_gate, h.data(), n, gate.data());
      MatMul(L.w_up, h.data(), n, up.data());
      SiluMul(gate.data(), up.data(), n * ffn, gate.data());
    }
    MatMul(L.w_down, gate.data(), n, h.data(), {MatMulEpilogue::Kind::kAddTo, x.data()});
  }

  RmsNorm(x.data(), w_.final_norm.data(), n, dim, spec_.norm_eps, x.data());
  if (observer && observer->on_hidden) observer->on_hidden(spec_.num_layers, x.data(), n, dim);
  const int64_t m = static_cast<int64_t>(batch.logits_indices.size());
  if (m == 0) return;
  std::vector<float> sel(m * dim);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t t = batch.logits_indices[i];
    PAGODA_CHECK(t >= 0 && t < n) << "logits index " << t;
    std::copy(&x[t * dim], &x[t * dim] + dim, &sel[i * dim]);
  }
  MatMul(w_.output, sel.data(), m, logits);
}

}  // namespace pagoda
