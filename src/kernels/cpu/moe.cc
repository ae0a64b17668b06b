#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/norm.h"

namespace pagoda {
namespace {

// Grown, never shrunk: a warmed-up call allocates nothing.
template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// Indices of the k largest values, largest first; ties go to the lower index (stable).
void TopK(const std::vector<double>& v, int64_t k, std::vector<int64_t>* idx) {
  idx->resize(v.size());
  std::iota(idx->begin(), idx->end(), 0);
  // stable_sort's order (ties by index) without its temporary buffer.
  std::sort(idx->begin(), idx->end(), [&](int64_t a, int64_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; });
  idx->resize(k);
}

// Zeroes the choice scores of experts outside the best topk_group groups (transformers'
// masked_fill(~mask, 0.0)); a group's score is its max (V2) or the sum of its best two (V3).
void MaskGroups(const MoeSpec& s, bool sum_top2, std::vector<double>& choice) {
  if (s.n_group <= 1 || s.topk_group >= s.n_group) return;
  thread_local std::vector<double> members, group_score;
  thread_local std::vector<int64_t> top;
  thread_local std::vector<uint8_t> keep;
  const int64_t per_group = s.num_experts / s.n_group;
  group_score.resize(s.n_group);
  for (int64_t g = 0; g < s.n_group; ++g) {
    members.assign(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
    std::sort(members.begin(), members.end(), std::greater<double>());
    group_score[g] = sum_top2 ? members[0] + (per_group > 1 ? members[1] : 0.0) : members[0];
  }
  keep.assign(s.n_group, 0);
  TopK(group_score, s.topk_group, &top);
  for (int64_t g : top) keep[g] = 1;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    if (!keep[e / per_group]) choice[e] = 0.0;
  }
}

}  // namespace

void SwiGlu(const CpuSwiGlu& w, const float* x, int64_t num_tokens, float* y, float* gate, float* up) {
  const int64_t ffn = w.gate.rows;
  MatMul(w.gate, x, num_tokens, gate);
  MatMul(w.up, x, num_tokens, up);
  SiluMul(gate, up, num_tokens * ffn, gate);
  MatMul(w.down, gate, num_tokens, y);
}

void RouteTokens(const MoeSpec& s, std::span<const float> score_bias, const float* logits,
                 int64_t num_tokens, int32_t* expert_ids, float* weights) {
  const int64_t ne = s.num_experts, k = s.num_experts_per_tok;
  const bool sigmoid = s.scoring_func == "sigmoid";
  thread_local std::vector<double> scores, choice;
  thread_local std::vector<int64_t> top;
  scores.resize(ne);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * ne;
    if (sigmoid) {
      for (int64_t e = 0; e < ne; ++e) scores[e] = 1.0 / (1.0 + std::exp(-double{row[e]}));
    } else {
      const double m = *std::max_element(row, row + ne);
      double sum = 0;
      for (int64_t e = 0; e < ne; ++e) sum += (scores[e] = std::exp(row[e] - m));
      for (double& v : scores) v /= sum;
    }
    choice = scores;
    if (!score_bias.empty()) {
      for (int64_t e = 0; e < ne; ++e) choice[e] += score_bias[e];
    }
    if (s.topk_method == "noaux_tc") {
      MaskGroups(s, /*sum_top2=*/true, choice);
    } else if (s.topk_method == "group_limited_greedy") {
      MaskGroups(s, /*sum_top2=*/false, choice);
    }
    TopK(choice, k, &top);
    double sum = 0;
    for (int64_t e : top) sum += scores[e];
    const bool normalize = s.norm_topk_prob && (sigmoid || k > 1);
    for (int64_t j = 0; j < k; ++j) {
      double wgt = scores[top[j]];
      if (normalize) wgt /= sum + 1e-20;
      if (sigmoid || !normalize) wgt *= s.routed_scaling_factor;
      expert_ids[t * k + j] = static_cast<int32_t>(top[j]);
      weights[t * k + j] = static_cast<float>(wgt);
    }
  }
}

void MoeForward(const MoeSpec& s, const CpuMoeWeights& w, const float* x, int64_t n, int64_t dim,
                float* y) {
  const int64_t ne = s.num_experts, k = s.num_experts_per_tok;
  PAGODA_CHECK(static_cast<int64_t>(w.experts.size()) == ne)
      << "MoE weights for " << w.experts.size() << " experts, spec says " << ne;
  // Per-thread scratch, kept between calls (one MoE layer at a time per thread).
  thread_local std::vector<float> logits_buf, wgt_buf, expert_out, xs, ys, gate, up, routed;
  thread_local std::vector<int32_t> ids_buf;
  thread_local std::vector<int64_t> starts, pairs, fill;
  float* logits = Grow(logits_buf, n * ne);
  MatMul(w.router, x, n, logits);
  int32_t* ids = Grow(ids_buf, n * k);
  float* wgt = Grow(wgt_buf, n * k);
  RouteTokens(s, w.score_bias, logits, n, ids, wgt);

  // The (token, slot) pairs grouped per expert in increasing pair order (a counting sort):
  // expert e's pairs are pairs[starts[e] .. starts[e + 1]).
  starts.assign(ne + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++starts[ids[i] + 1];
  for (int64_t e = 0; e < ne; ++e) starts[e + 1] += starts[e];
  fill.assign(starts.begin(), starts.end() - 1);
  Grow(pairs, n * k);
  for (int64_t i = 0; i < n * k; ++i) pairs[fill[ids[i]]++] = i;

  float* out = Grow(expert_out, n * k * dim);  // [n, k, dim]: output of slot (t, j)
  int64_t max_ffn = w.shared.empty() ? 0 : w.shared.gate.rows;
  for (const CpuSwiGlu& e : w.experts) max_ffn = std::max(max_ffn, e.gate.rows);
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t m = starts[e + 1] - starts[e];
    if (m == 0) continue;
    const int64_t* p = pairs.data() + starts[e];
    float* xe = Grow(xs, m * dim);
    float* ye = Grow(ys, m * dim);
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + (p[i] / k) * dim, dim, xe + i * dim);
    SwiGlu(w.experts[e], xe, m, ye, Grow(gate, m * max_ffn), Grow(up, m * max_ffn));
    for (int64_t i = 0; i < m; ++i) std::copy_n(ye + i * dim, dim, out + p[i] * dim);
  }
  if (w.shared.empty()) {
    std::fill_n(y, n * dim, 0.0f);
  } else {
    SwiGlu(w.shared, x, n, y, Grow(gate, n * max_ffn), Grow(up, n * max_ffn));
  }
  // Each token sums its own slots in top-k order: independent of the batch.
  float* r = Grow(routed, dim);
  for (int64_t t = 0; t < n; ++t) {
    std::fill_n(r, dim, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float a = wgt[t * k + j];
      const float* o = out + (t * k + j) * dim;
      for (int64_t i = 0; i < dim; ++i) r[i] += a * o[i];
    }
    for (int64_t i = 0; i < dim; ++i) y[t * dim + i] += r[i];
  }
}

}  // namespace pagoda
