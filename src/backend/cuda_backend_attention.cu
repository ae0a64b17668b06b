// CudaBackend's attention ops: the layer's attention inputs (one kernel), paged attention
// (tensor cores or SIMT, kernels/cuda/flash_attention.h, paged_attention.h) and MLA.
#include "backend/cuda_backend_state.cuh"

#include "backend/cuda_kv_cache.cuh"
#include "kernels/cuda/attention_inputs.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/mla_attention.h"
#include "kernels/cuda/paged_attention.h"

namespace pagoda {

void CudaBackend::WriteAttentionInputs(KVCache& cache, int64_t layer, const AttentionInputs& in) {
  const AttentionLayer& a = in.layer;
  if (a.head_dim > cuda::kMaxKVQuantDim || in.rope == nullptr || in.rope->dim > a.head_dim ||
      AsCudaKVCache(cache).uses_wide(layer)) {  // the side pool: WriteKV's wide copies
    Backend::WriteAttentionInputs(cache, layer, in);  // the separate ops
    return;
  }
  OpTimer timer(s_.get(), "WriteAttentionInputs");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  CudaKVCache& c = AsCudaKVCache(cache);
  const int64_t qw = a.num_heads * a.head_dim, kw = a.num_kv_heads * a.head_dim;
  PAGODA_CHECK(in.q.contiguous() && in.q.cols == qw && in.src_q.cols == qw && in.src_k.cols == kw &&
               in.src_v.cols == kw && c.k_width() == kw && c.v_width() == kw)
      << "WriteAttentionInputs: q/k/v of " << in.src_q.cols << "/" << in.src_k.cols << "/" << in.src_v.cols
      << " columns, cache rows of " << c.k_width() << "/" << c.v_width();
  cuda::AttentionInputsParams p;
  p.src_q = in.src_q.f32();
  p.src_k = in.src_k.f32();
  p.src_v = in.src_v.f32();
  p.src_q_stride = in.src_q.row_stride;
  p.src_k_stride = in.src_k.row_stride;
  p.src_v_stride = in.src_v.row_stride;
  p.bq = in.bq != nullptr ? in.bq->f32() : nullptr;
  p.bk = in.bk != nullptr ? in.bk->f32() : nullptr;
  p.bv = in.bv != nullptr ? in.bv->f32() : nullptr;
  p.q = in.q.f32();
  p.num_tokens = in.q.rows;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.positions = s_->positions.Get<int32_t>(0);
  p.inv_freq = s_->RopeTable(*in.rope);
  p.rope_dim = in.rope->dim;
  p.interleaved = in.rope->interleaved;
  p.magnitude = in.rope->magnitude;
  p.slot_mapping = s_->slots.Get<int64_t>(0);
  p.k_cache = c.k(layer);
  p.v_cache = c.v(layer);
  p.dtype = c.shape().dtype;
  p.k_format = c.k_format(layer);
  p.v_format = c.v_format(layer);
  cuda::WriteAttentionInputs(p, s_->stream, s_->gemm_pdl && p.num_tokens <= kPdlMaxRows);
}

void CudaBackend::ObserveQueries(KVCache&, int64_t, const TensorView&, int64_t, float) {
  // Only the query-aware policy (--kv-heavy-tokens) observes queries; it is refused here.
}

void CudaBackend::PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                                 const TensorView& out) {
  OpTimer timer(s_.get(), "PagedAttention");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  PAGODA_CHECK(q.contiguous() && out.contiguous()) << "CudaBackend::PagedAttention: q and out must be contiguous";
  CudaKVCache& c = AsCudaKVCache(cache);
  PAGODA_CHECK(a.num_kv_heads == c.shape().num_kv_heads && a.head_dim == c.shape().head_dim)
      << "PagedAttention: layer heads do not match the cache";
  PagedAttentionParams p;
  p.q = q.f32();
  p.out = out.f32();
  p.num_tokens = q.rows;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.k_cache = c.k(layer);
  p.v_cache = c.v(layer);
  p.kv_dtype = c.shape().dtype;
  p.k_format = c.k_format(layer);
  p.v_format = c.v_format(layer);
  p.block_size = c.shape().block_size;
  p.positions = s_->positions.Get<int32_t>(0);
  p.block_tables = s_->token_tables.Get<const int32_t*>(0);
  p.scale = a.scale;
  p.sliding_window = a.sliding_window;
  // FlashAttention over p (its output, and for side-pool steps the log-sum-exps, in scratch's
  // tail); the o GEMM's bf16 input beside it where allowed.
  auto run_flash = [&](PagedAttentionParams& fp, bool bf16_out) {
    // A captured graph serves the later steps of its split depth (StepGraphs' shape).
    const int64_t keys = s_->max_keys;
    State& s = *s_;
    const cuda::FlashShape shape = cuda::ChooseFlashShape(q.rows, s.step->num_seqs(), fp.k_format.quant);
    const cuda::FlashWorkItem* items = nullptr;
    if (shape == cuda::FlashShape::kWide) {
      const int64_t per_item = cuda::FlashTokensPerItem(fp, keys);
      if (s.flash_items_serial != s.step_serial || s.flash_items_per_item != per_item) {
        const std::vector<cuda::FlashWorkItem> list = cuda::FlashWorkItems(s.step->query_start_loc, per_item);
        s.flash_items.Upload(list.data(), static_cast<int64_t>(list.size()));
        s.flash_items_serial = s.step_serial;
        s.flash_items_per_item = per_item;
        s.num_flash_items = static_cast<int64_t>(list.size());
      }
      items = s.flash_items.Get<cuda::FlashWorkItem>(s.num_flash_items);
    }
    const int64_t partial = cuda::FlashAttentionScratchFloats(q.rows, a.num_heads, a.head_dim);
    float* scratch = s.attention_partial.Get<float>(partial + (fp.codes_only ? q.rows * a.num_heads : 0));
    if (fp.codes_only) fp.lse = scratch + partial;
    // The o GEMM's input in bf16 too (State::XBf16), where the output rows are contiguous.
    uint16_t* out_bf16 = nullptr;
    const int64_t cols = a.num_heads * a.head_dim;
    if (bf16_out && s.x_bf16_on && cuda::GemmConvertsX(q.rows) && out.cols == cols && out.row_stride == cols) {
      out_bf16 = s.gemm_x.Get<uint16_t>(q.rows * cols);
      s.x_bf16 = State::XBf16{out.f32(), out_bf16, q.rows, cols, s.op_serial};
    }
    cuda::FlashAttention(fp, shape, keys, items, s.num_flash_items, scratch, s.stream, out_bf16,
                         s.gemm_pdl && q.rows <= kPdlMaxRows);
  };
  if (c.uses_wide(layer)) {  // kivi2, sink or recent tokens: some keys from the side pool
    p.k_wide = c.k_wide(layer);
    p.v_wide = c.v_wide(layer);
    p.wide_dtype = c.shape().dtype;
    p.wide_index = c.wide_index();
    p.sink_tokens = c.shape().sink_tokens;
    p.recent_tokens = c.shape().recent_tokens;
    p.own_block_wide = c.k_format(layer).quant == KVQuant::kKivi2;
    // Formats FlashAttention reads: it takes each query's keys that read codes whatever the
    // side pool holds, the SIMT kernel the few others (sink tokens, the own block's wide keys).
    PagedAttentionParams fp = p;
    fp.codes_only = true;
    if (cuda::SidePoolFlashOn() && cuda::FlashAttentionSupports(fp) && cuda::PagedAttentionWideRestServes(fp)) {
      run_flash(fp, false);
      cuda::PagedAttentionWideRest(fp, s_->stream);
      return;
    }
    // A captured graph's grid covers every split: it serves any later context.
    const int64_t keys = s_->graphs->capturing() ? int64_t{1} << 40 : s_->max_keys;
    float* scratch =
        s_->attention_partial.Get<float>(cuda::PagedAttentionWideScratchFloats(q.rows, a.num_heads, a.head_dim));
    cuda::PagedAttentionWide(p, keys, scratch, s_->stream);
    return;
  }
  if (cuda::FlashAttentionSupports(p)) {
    run_flash(p, true);
    return;
  }
  // The grouped kernel's captured grid covers every split: it serves any later context.
  const int64_t keys = s_->graphs->capturing() ? int64_t{1} << 40 : s_->max_keys;
  float* scratch = s_->attention_partial.Get<float>(cuda::PagedAttentionScratchFloats(q.rows, a.num_heads, a.head_dim));
  cuda::PagedAttention(p, keys, scratch, s_->stream);
}

void CudaBackend::MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                               const TensorView& out) {
  OpTimer timer(s_.get(), "MlaAttention");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  PAGODA_CHECK(q.contiguous() && out.contiguous()) << "CudaBackend::MlaAttention: q and out must be contiguous";
  CudaKVCache& c = AsCudaKVCache(cache);
  const KVStorageShape& cs = c.shape();
  PAGODA_CHECK(cs.num_kv_heads == 1) << "MlaAttention: the cache was not made for MLA";
  MlaAttentionParams p;
  p.q = q.f32();
  p.out = out.f32();
  p.num_tokens = q.rows;
  p.num_heads = num_heads;
  p.kv_lora_rank = cs.head_dim;
  p.rope_dim = cs.head_dim_v;
  p.latent_cache = c.k(layer);
  p.rope_cache = c.v(layer);
  p.kv_dtype = cs.dtype;
  PAGODA_CHECK(c.k_format(layer).quant == KVQuant::kNone) << "MlaAttention: a quantized latent cache";
  p.block_size = cs.block_size;
  p.positions = s_->positions.Get<int32_t>(0);
  p.block_tables = s_->token_tables.Get<const int32_t*>(0);
  p.scale = scale;
  // As FlashAttention's: a captured graph serves the later steps of its split depth.
  const int64_t floats = cuda::MlaAttentionScratchFloats(p, s_->max_keys);
  cuda::MlaAttention(p, s_->max_keys, floats > 0 ? s_->attention_partial.Get<float>(floats) : nullptr, s_->stream);
}

}  // namespace pagoda
