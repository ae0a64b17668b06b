#include "model/model_spec.h"

#include "core/error.h"

namespace pagoda {

const char* AttentionKindName(AttentionKind k) {
  switch (k) {
    case AttentionKind::kMHA: return "MHA";
    case AttentionKind::kGQA: return "GQA";
    case AttentionKind::kMQA: return "MQA";
    case AttentionKind::kMLA: return "MLA";
  }
  return "?";
}

AttentionKind ModelSpec::attention_kind() const {
  if (is_mla()) return AttentionKind::kMLA;
  if (num_kv_heads == num_heads) return AttentionKind::kMHA;
  if (num_kv_heads == 1) return AttentionKind::kMQA;
  return AttentionKind::kGQA;
}

KVShape ModelSpec::kv_shape() const {
  KVShape s;
  s.num_layers = num_layers;
  if (is_mla()) {
    s.mla = true;
    s.num_kv_heads = 1;
    s.head_dim_k = mla.kv_lora_rank;
    s.head_dim_v = 0;
    s.rope_dim = mla.qk_rope_head_dim;
  } else {
    s.num_kv_heads = num_kv_heads;
    s.head_dim_k = head_dim;
    s.head_dim_v = head_dim;
  }
  return s;
}

namespace {
int64_t AttentionParams(const ModelSpec& s) {
  if (s.is_mla()) {
    const auto& m = s.mla;
    const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    int64_t q = m.q_lora_rank > 0 ? s.dim * m.q_lora_rank + m.q_lora_rank * s.num_heads * qk
                                  : s.dim * s.num_heads * qk;
    const int64_t kv_a = s.dim * (m.kv_lora_rank + m.qk_rope_head_dim);
    const int64_t kv_b = m.kv_lora_rank * s.num_heads * (m.qk_nope_head_dim + m.v_head_dim);
    const int64_t o = s.num_heads * m.v_head_dim * s.dim;
    return q + kv_a + kv_b + o;
  }
  return s.dim * s.head_dim * (2 * s.num_heads + 2 * s.num_kv_heads);
}
bool IsMoeLayer(const ModelSpec& s, int64_t layer) {
  return s.moe.num_experts > 0 && layer >= s.moe.first_k_dense_replace;
}
}  // namespace

int64_t ModelSpec::NumParameters() const {
  int64_t total = vocab_size * dim * (tied_embeddings ? 1 : 2);
  for (int64_t l = 0; l < num_layers; ++l) {
    total += AttentionParams(*this);
    if (IsMoeLayer(*this, l)) {
      total += (moe.num_experts + moe.num_shared_experts) * 3 * dim * moe.expert_ffn_dim +
               moe.num_experts * dim;
    } else {
      total += 3 * dim * ffn_dim;
    }
  }
  return total;
}

int64_t ModelSpec::NumActiveParameters() const {
  // The embedding table is gathered (one row per token), not read whole; the classifier is.
  int64_t total = vocab_size * dim;
  for (int64_t l = 0; l < num_layers; ++l) {
    total += AttentionParams(*this);
    if (IsMoeLayer(*this, l)) {
      total += (moe.num_experts_per_tok + moe.num_shared_experts) * 3 * dim * moe.expert_ffn_dim +
               moe.num_experts * dim;
    } else {
      total += 3 * dim * ffn_dim;
    }
  }
  return total;
}

void ModelSpec::Validate() const {
  auto positive = [&](int64_t v, const char* field) {
    PAGODA_ENSURE(v > 0, ErrorCode::kInvalidArgument,
                  name << ": " << field << " must be positive (got " << v << ")");
  };
  positive(vocab_size, "vocab_size");
  positive(dim, "hidden size");
  positive(num_layers, "number of layers");
  positive(num_heads, "number of attention heads");
  if (!is_mla()) {
    positive(num_kv_heads, "number of key/value heads");
    positive(head_dim, "head dim");
    PAGODA_ENSURE(num_heads % num_kv_heads == 0, ErrorCode::kInvalidArgument,
                  name << ": " << num_heads << " attention heads are not a multiple of "
                       << num_kv_heads << " key/value heads");
    PAGODA_ENSURE(rope.dim > 0 && rope.dim <= head_dim && rope.dim % 2 == 0,
                  ErrorCode::kInvalidArgument, name << ": bad rotary dim " << rope.dim);
  }
  if (moe.num_experts == 0 || moe.first_k_dense_replace > 0) positive(ffn_dim, "intermediate size");
}

}  // namespace pagoda
