#include "model/arch/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/rope.h"
#include "model/weight_views.h"

namespace pagoda {

LlamaModel::LlamaModel(ModelSpec spec, LlamaWeights weights, std::vector<int32_t> eos_ids)
    : spec_(std::move(spec)), w_(std::move(weights)), eos_ids_(std::move(eos_ids)) {
  spec_.Validate();
  rope_ = MakeRopeParams(spec_.rope);
}

void LlamaModel::PrepareWeights(Backend& backend) {
  auto vec = [&](const std::vector<float>& v) { return backend.PrepareVector(v); };
  // Stacked q|k|v and gate|up when the backend has a stacked form, else each matrix alone.
  auto stack = [&](std::vector<WeightMatrix> parts, StackOrder order, Weight* fused, std::vector<Weight*> alone) {
    *fused = backend.PrepareStacked(parts, order);
    any_stacked_ = any_stacked_ || !fused->empty();
    if (!fused->empty()) return;
    for (size_t i = 0; i < parts.size(); ++i) *alone[i] = backend.PrepareWeight(parts[i]);
  };
  layers_.resize(w_.layers.size());
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LlamaLayerWeights& L = w_.layers[l];
    Layer& P = layers_[l];
    P.attn_norm = vec(L.attn_norm);
    P.ffn_norm = vec(L.ffn_norm);
    if (!L.bq.empty()) P.bq = vec(L.bq);
    if (!L.bk.empty()) P.bk = vec(L.bk);
    if (!L.bv.empty()) P.bv = vec(L.bv);
    stack({L.wq, L.wk, L.wv}, StackOrder::kConcat, &P.qkv, {&P.wq, &P.wk, &P.wv});
    // gate and up 16 rows at a time: the MatMul applies silu(gate) * up to each block of rows.
    stack({L.w_gate, L.w_up}, StackOrder::kPairs16, &P.gate_up, {&P.w_gate, &P.w_up});
    P.wo = backend.PrepareWeight(L.wo);
    P.w_down = backend.PrepareWeight(L.w_down);
  }
  output_ = backend.PrepareWeight(w_.output);
  embedding_ = backend.PrepareWeight(w_.embedding, WeightLayout::kRowMajor);
  final_norm_ = vec(w_.final_norm);
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

LlamaModel::Buffers LlamaModel::Views(int64_t n, int64_t m) {
  Backend& b = backend();
  const int64_t dim = spec_.dim, q_dim = spec_.num_heads * spec_.head_dim;
  const int64_t kv_dim = spec_.num_kv_heads * spec_.head_dim, ffn = spec_.ffn_dim;
  const bool all_stacked = std::all_of(layers_.begin(), layers_.end(),
                                       [](const Layer& L) { return !L.qkv.empty() && !L.gate_up.empty(); });
  enum Slot { kX, kH, kQ, kK, kV, kAttn, kGate, kUp, kFused, kSel };
  Buffers v;
  v.x = ws_.Get(b, kX, n, dim);
  v.h = ws_.Get(b, kH, n, dim);
  v.q = ws_.Get(b, kQ, n, q_dim);
  v.k = ws_.Get(b, kK, n, kv_dim);
  v.v = ws_.Get(b, kV, n, kv_dim);
  v.attn = ws_.Get(b, kAttn, n, q_dim);
  v.gate = ws_.Get(b, kGate, n, ffn);
  v.up = ws_.Get(b, kUp, all_stacked ? 0 : n, ffn);
  v.fused = ws_.Get(b, kFused, any_stacked_ ? n : 0, std::max(q_dim + 2 * kv_dim, 2 * ffn));
  v.sel = ws_.Get(b, kSel, m, dim);
  return v;
}

std::unique_ptr<Model> LlamaModel::Shard(int rank, int size, Backend& backend) const {
  CheckShardRank(rank, size);
  const int64_t kv = spec_.num_kv_heads, hd = spec_.head_dim, ffn = spec_.ffn_dim;
  // More ranks than KV heads: each KV head is replicated on size / kv ranks (as vLLM does),
  // each rank keeping its own query heads of that group.
  if (kv % size != 0 && size % kv != 0) {
    ThrowUnsupported("--tensor-parallel-size " + std::to_string(size) + " does not divide the " + std::to_string(kv) +
                     " key/value heads of " + spec_.name + " (nor is it a multiple of them)");
  }
  RequireShardDivides(spec_.num_heads, size, "attention heads", spec_.name);
  RequireShardDivides(ffn, size, "MLP width", spec_.name);
  // Query head h reads KV head h / group, so a rank's KV heads and their query heads are
  // contiguous rows of wq, wk, wv (and columns of wo).
  const int64_t kv_per = std::max<int64_t>(1, kv / size), q_per = spec_.num_heads / size, ffn_per = ffn / size;
  // The rank's first KV head: its query heads' group.
  const int64_t kv_first = kv >= size ? rank * kv_per : rank / (size / kv);
  ModelSpec s = spec_;
  s.num_heads = q_per;
  s.num_kv_heads = kv_per;
  s.ffn_dim = ffn_per;
  LlamaWeights w;
  w.embedding = w_.embedding;
  w.output = w_.output;
  w.final_norm = w_.final_norm;
  w.keep_alive = w_.keep_alive;
  for (const LlamaLayerWeights& L : w_.layers) {
    LlamaLayerWeights S;
    S.attn_norm = L.attn_norm;
    S.ffn_norm = L.ffn_norm;
    S.wq = RowSlice(L.wq, rank * q_per * hd, q_per * hd);
    S.wk = RowSlice(L.wk, kv_first * hd, kv_per * hd);
    S.wv = RowSlice(L.wv, kv_first * hd, kv_per * hd);
    S.bq = SliceValues(L.bq, rank * q_per * hd, q_per * hd);
    S.bk = SliceValues(L.bk, kv_first * hd, kv_per * hd);
    S.bv = SliceValues(L.bv, kv_first * hd, kv_per * hd);
    S.wo = ColSlice(L.wo, rank * q_per * hd, q_per * hd, &w.keep_alive);
    S.w_gate = RowSlice(L.w_gate, rank * ffn_per, ffn_per);
    S.w_up = RowSlice(L.w_up, rank * ffn_per, ffn_per);
    S.w_down = ColSlice(L.w_down, rank * ffn_per, ffn_per, &w.keep_alive);
    w.layers.push_back(std::move(S));
  }
  auto shard = std::make_unique<LlamaModel>(std::move(s), std::move(w), eos_ids_);
  shard->tp_size_ = size;
  shard->Prepare(backend);
  return shard;
}

void LlamaModel::ReserveWorkspace(int64_t max_tokens, int64_t max_logits) {
  Views(max_tokens, max_logits);
  backend().ReserveScratch(max_tokens, max_logits);
}

void LlamaModel::Forward(const StepDescription& step, Backend& backend, KVCache& cache, const TensorView& logits,
                         const ForwardObserver* observer) {
  CheckBackend(backend);
  const int64_t n = step.num_tokens(), m = step.num_logits();
  const int64_t hd = spec_.head_dim;
  const int64_t q_dim = spec_.num_heads * hd, kv_dim = spec_.num_kv_heads * hd;
  const int64_t ffn = spec_.ffn_dim;
  // Every buffer is written before it is read, so stale contents never matter.
  const Buffers B = Views(n, m);
  backend.BeginStep(step, cache);
  backend.Embedding(embedding_, B.x);

  AttentionLayer attention;
  attention.num_heads = spec_.num_heads;
  attention.num_kv_heads = spec_.num_kv_heads;
  attention.head_dim = hd;
  attention.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  attention.sliding_window = spec_.sliding_window;

  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (observer && observer->on_hidden) observer->on_hidden(l, B.x.f32(), n, spec_.dim);
    const Layer& L = layers_[l];
    backend.RmsNorm(B.x, L.attn_norm.view, spec_.norm_eps, B.h);
    AttentionInputs in;
    in.q = B.q;
    in.k = B.k;
    in.v = B.v;
    if (!L.qkv.empty()) {  // one stacked MatMul; q | k | v are its column ranges
      const TensorView fused = B.fused.As(n, q_dim + 2 * kv_dim);
      backend.MatMul(L.qkv, B.h, fused);
      in.src_q = fused.ColRange(0, q_dim);
      in.src_k = fused.ColRange(q_dim, kv_dim);
      in.src_v = fused.ColRange(q_dim + kv_dim, kv_dim);
    } else {
      backend.MatMul(L.wq, B.h, B.q);
      backend.MatMul(L.wk, B.h, B.k);
      backend.MatMul(L.wv, B.h, B.v);
      in.src_q = B.q;
      in.src_k = B.k;
      in.src_v = B.v;
    }
    if (!L.bq.empty()) in.bq = &L.bq.view;
    if (!L.bk.empty()) in.bk = &L.bk.view;
    if (!L.bv.empty()) in.bv = &L.bv.view;
    in.rope = &rope_;
    in.layer = attention;
    // Biases, RoPE, the K/V write (one kernel on the GPU).
    backend.WriteAttentionInputs(cache, l, in);
    backend.PagedAttention(cache, l, attention, B.q, B.attn);
    // The residual adds and silu(gate) * up run inside the MatMul, on each work item's block
    // while it is in cache (the same bits as the separate ops).
    if (tp_size_ > 1) {  // row-parallel: this rank's heads' share, summed over the ranks
      backend.MatMul(L.wo, B.attn, B.h);
      backend.AllReduce(B.h);
      backend.Add(B.h, B.x);
    } else {
      backend.MatMul(L.wo, B.attn, B.h, {Epilogue::Kind::kAddTo, B.x});
    }

    backend.RmsNorm(B.x, L.ffn_norm.view, spec_.norm_eps, B.h);
    if (!L.gate_up.empty()) {
      backend.MatMul(L.gate_up, B.h, B.fused.As(n, 2 * ffn), {Epilogue::Kind::kSiluMulPairs, B.gate});
    } else {
      backend.MatMul(L.w_gate, B.h, B.gate);
      backend.MatMul(L.w_up, B.h, B.up);
      backend.SiluMul(B.gate, B.up, B.gate);
    }
    if (tp_size_ > 1) {
      backend.MatMul(L.w_down, B.gate, B.h);
      backend.AllReduce(B.h);
      backend.Add(B.h, B.x);
    } else {
      backend.MatMul(L.w_down, B.gate, B.h, {Epilogue::Kind::kAddTo, B.x});
    }
  }

  backend.RmsNorm(B.x, final_norm_.view, spec_.norm_eps, B.x);
  if (observer && observer->on_hidden) observer->on_hidden(spec_.num_layers, B.x.f32(), n, spec_.dim);
  if (m == 0) return;
  backend.GatherLogitRows(B.x, B.sel);
  backend.MatMul(output_, B.sel, logits);
}

}  // namespace pagoda
