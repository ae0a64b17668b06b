#include "backend/backend.h"

#include "core/error.h"

namespace pagoda {

void Backend::AllReduce(const TensorView& x) {
  if (comm_ == nullptr || comm_->size() == 1 || x.rows == 0 || x.cols == 0) return;
  PAGODA_CHECK(x.dtype == DType::kF32) << "AllReduce: f32 only";
  if (x.contiguous()) {
    comm_->AllReduceSum(x.f32(), x.rows * x.cols);
    return;
  }
  for (int64_t r = 0; r < x.rows; ++r) comm_->AllReduceSum(x.f32() + r * x.row_stride, x.cols);
}

void Backend::WriteAttentionInputs(KVCache& cache, int64_t layer, const AttentionInputs& in) {
  const AttentionLayer& a = in.layer;
  if (in.src_q.data != in.q.data) Copy(in.src_q, in.q);
  if (in.src_k.data != in.k.data) Copy(in.src_k, in.k);
  if (in.src_v.data != in.v.data) Copy(in.src_v, in.v);
  if (in.bq != nullptr) AddBias(*in.bq, in.q);
  if (in.bk != nullptr) AddBias(*in.bk, in.k);
  if (in.bv != nullptr) AddBias(*in.bv, in.v);
  PAGODA_CHECK(in.rope != nullptr) << "WriteAttentionInputs: no RoPE";
  Rope(*in.rope, in.q, a.num_heads, a.head_dim, 0);
  Rope(*in.rope, in.k, a.num_kv_heads, a.head_dim, 0);
  WriteKV(cache, layer, in.k, in.v);
  ObserveQueries(cache, layer, in.q, a.num_heads, a.scale);
}

}  // namespace pagoda
