#include "model/arch/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"

namespace pagoda {
namespace {

// Indices of the k largest values, largest first; ties go to the lower index (stable).
std::vector<int64_t> TopK(const std::vector<double>& v, int64_t k) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

// Zeroes the choice scores of experts outside the best topk_group groups (transformers'
// masked_fill(~mask, 0.0)); a group's score is its max (V2) or the sum of its best two (V3).
void MaskGroups(const MoeSpec& s, bool sum_top2, std::vector<double>& choice) {
  if (s.n_group <= 1 || s.topk_group >= s.n_group) return;
  const int64_t per_group = s.num_experts / s.n_group;
  std::vector<double> group_score(s.n_group);
  for (int64_t g = 0; g < s.n_group; ++g) {
    std::vector<double> members(choice.begin() + g * per_group,
                                choice.begin() + (g + 1) * per_group);
    std::sort(members.begin(), members.end(), std::greater<double>());
    group_score[g] = sum_top2 ? members[0] + (per_group > 1 ? members[1] : 0.0) : members[0];
  }
  std::vector<bool> keep(s.n_group, false);
  for (int64_t g : TopK(group_score, s.topk_group)) keep[g] = true;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    if (!keep[e / per_group]) choice[e] = 0.0;
  }
}

}  // namespace

void SwiGlu(const SwiGluWeights& w, const float* x, int64_t num_tokens, float* y) {
  const int64_t ffn = w.gate.rows;
  std::vector<float> gate(num_tokens * ffn), up(num_tokens * ffn);
  MatMul(w.gate, x, num_tokens, gate.data());
  MatMul(w.up, x, num_tokens, up.data());
  SiluMul(gate.data(), up.data(), num_tokens * ffn, gate.data());
  MatMul(w.down, gate.data(), num_tokens, y);
}

void RouteTokens(const MoeSpec& s, const std::vector<float>& score_bias, const float* logits,
                 int64_t num_tokens, int32_t* expert_ids, float* weights) {
  const int64_t ne = s.num_experts, k = s.num_experts_per_tok;
  const bool sigmoid = s.scoring_func == "sigmoid";
  std::vector<double> scores(ne), choice(ne);
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
    const std::vector<int64_t> top = TopK(choice, k);
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

void MoeForward(const MoeSpec& s, const MoeWeights& w, const float* x, int64_t n, int64_t dim,
                float* y) {
  const int64_t ne = s.num_experts, k = s.num_experts_per_tok;
  PAGODA_CHECK(static_cast<int64_t>(w.experts.size()) == ne)
      << "MoE weights for " << w.experts.size() << " experts, spec says " << ne;
  std::vector<float> logits(n * ne);
  MatMul(w.router, x, n, logits.data());
  std::vector<int32_t> ids(n * k);
  std::vector<float> wgt(n * k);
  RouteTokens(s, w.score_bias, logits.data(), n, ids.data(), wgt.data());

  // Group the (token, slot) pairs per expert; run each expert once over its tokens.
  std::vector<std::vector<int64_t>> assigned(ne);
  for (int64_t i = 0; i < n * k; ++i) assigned[ids[i]].push_back(i);
  std::vector<float> expert_out(n * k * dim);  // [n, k, dim]: output of slot (t, j)
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < ne; ++e) {
    const auto& pairs = assigned[e];
    const int64_t m = static_cast<int64_t>(pairs.size());
    if (m == 0) continue;
    xs.resize(m * dim);
    ys.resize(m * dim);
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + (pairs[i] / k) * dim, dim, &xs[i * dim]);
    SwiGlu(w.experts[e], xs.data(), m, ys.data());
    for (int64_t i = 0; i < m; ++i) std::copy_n(&ys[i * dim], dim, &expert_out[pairs[i] * dim]);
  }
  if (w.shared.empty()) {
    std::fill_n(y, n * dim, 0.0f);
  } else {
    SwiGlu(w.shared, x, n, y);
  }
  // Each token sums its own slots in top-k order: independent of the batch.
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> routed(dim, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float a = wgt[t * k + j];
      const float* o = &expert_out[(t * k + j) * dim];
      for (int64_t i = 0; i < dim; ++i) routed[i] += a * o[i];
    }
    for (int64_t i = 0; i < dim; ++i) y[t * dim + i] += routed[i];
  }
}

}  // namespace pagoda
