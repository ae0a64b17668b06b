#include "backend/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backend/kv_storage.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/sampler.h"

namespace pagoda {
namespace {

// A prepared weight: the view MatMul takes and the panels it may point at.
struct CpuPrepared {
  CpuWeight w;
  std::shared_ptr<const PackedWeights> packed;
};

const CpuWeight& Cpu(const Weight& w) {
  PAGODA_DCHECK(w.impl != nullptr);
  return static_cast<const CpuPrepared*>(w.impl.get())->w;
}

Weight Wrap(const WeightMatrix& source, std::shared_ptr<CpuPrepared> p) {
  Weight w;
  w.dtype = source.dtype;
  w.rows = source.rows;
  w.cols = source.cols;
  w.impl = std::move(p);
  return w;
}

struct CpuSamplerState : SamplerState {
  explicit CpuSamplerState(const SamplingParams& p) : sampler(p) {}
  Sampler sampler;
};

KVStorage& Storage(KVCache& cache) {
  auto* s = dynamic_cast<KVStorage*>(&cache);
  PAGODA_CHECK(s != nullptr) << "the KV cache was not made by the CPU backend";
  return *s;
}

void CheckF32(const TensorView& v, const char* what) {
  PAGODA_CHECK(v.dtype == DType::kF32 && v.device == Device::kCpu) << "CpuBackend: " << what << " is not an f32 CPU view";
}

void CheckContiguous(const TensorView& v, const char* what) {
  CheckF32(v, what);
  PAGODA_CHECK(v.contiguous()) << "CpuBackend: " << what << " must be contiguous";
}

}  // namespace

Backend& DefaultCpuBackend() {
  static CpuBackend backend;
  return backend;
}

std::unique_ptr<Backend> NewCpuBackend() { return std::make_unique<CpuBackend>(); }

Weight CpuBackend::PrepareWeight(const WeightMatrix& w, WeightLayout layout) {
  auto p = std::make_shared<CpuPrepared>();
  p->w = CpuWeight(w);
  if (layout == WeightLayout::kFastest && w.rows > 0) {
    const auto start = std::chrono::steady_clock::now();
    p->packed = PackWeightsForCpu(w);
    if (p->packed != nullptr) {
      p->w.packed = p->packed.get();
      ++packed_count_;
      packed_bytes_ += p->packed->bytes();
      pack_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  return Wrap(w, std::move(p));
}

Weight CpuBackend::PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<const PackedWeights> packed =
      PackStackedForCpu(std::vector<WeightMatrix>(parts.begin(), parts.end()), order);
  if (packed == nullptr) return Weight{};
  auto p = std::make_shared<CpuPrepared>();
  p->w = PackedOnlyView(*packed);
  p->packed = std::move(packed);
  ++packed_count_;
  ++stacked_count_;
  packed_bytes_ += p->packed->bytes();
  pack_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const WeightMatrix shape = p->w;
  return Wrap(shape, std::move(p));
}

void CpuBackend::PrepareMoe(MoeLayer* layer) {
  auto m = std::make_shared<CpuMoeWeights>();
  auto cpu = [](const Weight& w) { return w.empty() ? CpuWeight() : Cpu(w); };
  m->router = cpu(layer->router);
  if (!layer->score_bias.empty()) {
    m->score_bias = std::span<const float>(layer->score_bias.view.f32(), layer->score_bias.view.cols);
  }
  for (size_t e = 0; e < layer->gate.size(); ++e) {
    m->experts.push_back({cpu(layer->gate[e]), cpu(layer->up[e]), cpu(layer->down[e])});
  }
  m->shared = {cpu(layer->shared_gate), cpu(layer->shared_up), cpu(layer->shared_down)};
  layer->impl = std::move(m);
}

PreparedVector CpuBackend::PrepareVector(std::span<const float> v) {
  auto owner = std::make_shared<std::vector<float>>(v.begin(), v.end());
  PreparedVector out;
  out.view = TensorView::F32(owner->data(), 1, static_cast<int64_t>(owner->size()));
  out.owner = std::move(owner);
  return out;
}

void CpuBackend::LogPrepared(std::string_view model_name) {
  if (packed_count_ > 0) {
    PAGODA_LOG(kInfo) << "packed " << packed_count_ << " weight matrices (" << stacked_count_
                      << " of them stacked q|k|v or gate|up) into row panels for the " << MatMulIsaName()
                      << " kernels (" << packed_bytes_ / (1 << 20) << " MiB, " << pack_seconds_ << " s)";
  }
  packed_count_ = stacked_count_ = packed_bytes_ = 0;
  pack_seconds_ = 0.0;
}

std::shared_ptr<float> CpuBackend::Allocate(int64_t floats) {
  // 64-byte aligned, with a line of slack past the end (vector tails may read a partial line).
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(floats, 1)) * 4 + 63) / 64 * 64 + 64;
  return std::shared_ptr<float>(static_cast<float*>(std::aligned_alloc(64, bytes)), [](float* p) { std::free(p); });
}

std::unique_ptr<KVCache> CpuBackend::CreateKVCache(const KVStorageShape& shape) {
  CheckKVCacheSupport(shape, KVCacheSupport{}, name());  // the CPU runs every format and policy
  return std::make_unique<KVStorage>(shape);
}

void CpuBackend::CopyBlock(KVCache& cache, int32_t src, int32_t dst) { Storage(cache).CopyBlock(src, dst); }

const StepDescription& CpuBackend::step() const {
  PAGODA_CHECK(step_ != nullptr) << "CpuBackend: an op before BeginStep";
  return *step_;
}

void CpuBackend::BeginStep(const StepDescription& s, KVCache& cache) {
  step_ = &s;
  ++step_serial_;
  token_tables_.resize(s.num_tokens());
  for (int64_t seq = 0; seq < s.num_seqs(); ++seq) {
    const int32_t* table = s.table(seq);
    for (int32_t t = s.query_start_loc[seq]; t < s.query_start_loc[seq + 1]; ++t) token_tables_[t] = table;
  }
  PAGODA_CHECK(s.block_size == cache.shape().block_size)
      << "step made for block size " << s.block_size << ", cache has " << cache.shape().block_size;
}

void CpuBackend::Embedding(const Weight& table, const TensorView& out) {
  CheckF32(out, "embedding output");
  const StepDescription& s = step();
  const CpuWeight& w = Cpu(table);
  for (int64_t t = 0; t < s.num_tokens(); ++t) {
    const int32_t id = s.token_ids[t];
    PAGODA_ENSURE(id >= 0 && id < w.rows, ErrorCode::kInvalidArgument,
                  "token id " << id << " is outside the vocabulary (size " << w.rows << ")");
    DequantizeRow(w.dtype, w.row(id), out.f32() + t * out.row_stride, out.cols);
  }
}

void CpuBackend::MatMul(const Weight& w, const TensorView& x, const TensorView& y, const Epilogue& ep) {
  CheckContiguous(x, "MatMul input");
  CheckContiguous(y, "MatMul output");
  const CpuWeight& cw = Cpu(w);
  switch (ep.kind) {
    case Epilogue::Kind::kNone:
      pagoda::MatMul(cw, x.f32(), x.rows, y.f32());
      return;
    case Epilogue::Kind::kAddTo:
      CheckContiguous(ep.out, "MatMul epilogue output");
      pagoda::MatMul(cw, x.f32(), x.rows, y.f32(), {MatMulEpilogue::Kind::kAddTo, ep.out.f32()});
      return;
    case Epilogue::Kind::kSiluMulPairs:
      CheckContiguous(ep.out, "MatMul epilogue output");
      pagoda::MatMul(cw, x.f32(), x.rows, y.f32(), {MatMulEpilogue::Kind::kSiluMulPairs, ep.out.f32()});
      return;
  }
}

void CpuBackend::RmsNorm(const TensorView& x, const TensorView& weight, double eps, const TensorView& y) {
  CheckContiguous(x, "RmsNorm input");
  CheckContiguous(y, "RmsNorm output");
  pagoda::RmsNorm(x.f32(), weight.f32(), x.rows, x.cols, eps, y.f32());
}

void CpuBackend::AddBias(const TensorView& bias, const TensorView& x) {
  CheckF32(x, "AddBias target");
  const float* b = bias.f32();
  for (int64_t t = 0; t < x.rows; ++t) {
    float* row = x.f32() + t * x.row_stride;
    for (int64_t i = 0; i < x.cols; ++i) row[i] += b[i];
  }
}

void CpuBackend::Add(const TensorView& y, const TensorView& x) {
  CheckF32(x, "Add target");
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* src = y.f32() + t * y.row_stride;
    float* dst = x.f32() + t * x.row_stride;
    for (int64_t i = 0; i < x.cols; ++i) dst[i] += src[i];
  }
}

void CpuBackend::SiluMul(const TensorView& gate, const TensorView& up, const TensorView& out) {
  CheckContiguous(gate, "SiluMul gate");
  CheckContiguous(up, "SiluMul up");
  CheckContiguous(out, "SiluMul output");
  pagoda::SiluMul(gate.f32(), up.f32(), gate.size(), out.f32());
}

void CpuBackend::Copy(const TensorView& src, const TensorView& dst) {
  PAGODA_CHECK(src.rows == dst.rows && src.cols == dst.cols) << "CpuBackend::Copy: shapes differ";
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(src.f32() + r * src.row_stride, src.cols, dst.f32() + r * dst.row_stride);
  };
  if (src.rows * src.cols < (1 << 16)) {
    rows(0, src.rows);
  } else {
    ParallelFor(src.rows, 64, rows);
  }
}

void CpuBackend::GatherLogitRows(const TensorView& x, const TensorView& out) {
  const StepDescription& s = step();
  for (int64_t i = 0; i < s.num_logits(); ++i) {
    const int32_t t = s.logits_indices[i];
    PAGODA_CHECK(t >= 0 && t < x.rows) << "logits index " << t;
    std::copy_n(x.f32() + t * x.row_stride, x.cols, out.f32() + i * out.row_stride);
  }
}

const RopeTable& CpuBackend::RopeTableFor(const RopeParams& rope) {
  RopeEntry* free = nullptr;
  for (RopeEntry& e : rope_tables_) {
    const bool same = e.inv_freq == rope.inv_freq && e.magnitude == rope.magnitude;
    if (same && e.serial == step_serial_) return e.table;
    if (free == nullptr && e.serial != step_serial_) free = &e;
  }
  if (free == nullptr) free = &rope_tables_.emplace_back();
  const StepDescription& s = step();
  FillRopeTable(rope, s.positions.data(), s.num_tokens(), &free->table);
  free->inv_freq = rope.inv_freq;  // copies into kept capacity
  free->magnitude = rope.magnitude;
  free->serial = step_serial_;
  return free->table;
}

void CpuBackend::Rope(const RopeParams& rope, const TensorView& x, int64_t num_heads, int64_t head_stride,
                      int64_t offset) {
  CheckContiguous(x, "Rope input");
  ApplyRope(rope, RopeTableFor(rope), x.rows, num_heads, head_stride, offset, x.f32());
}

void CpuBackend::WriteKV(KVCache& cache, int64_t layer, const TensorView& k, const TensorView& v) {
  CheckContiguous(k, "WriteKV k");
  CheckContiguous(v, "WriteKV v");
  const StepDescription& s = step();
  Storage(cache).Write(layer, k.f32(), v.f32(), s.slot_mapping.data(), s.num_tokens(), s.positions.data());
}

void CpuBackend::ObserveQueries(KVCache& cache, int64_t layer, const TensorView& q, int64_t num_heads, float scale) {
  const StepDescription& s = step();
  Storage(cache).ObserveQueries(layer, q.f32(), num_heads, s.slot_mapping.data(), s.num_tokens(), scale);
}

void CpuBackend::PagedAttention(KVCache& cache, int64_t layer, const AttentionLayer& a, const TensorView& q,
                                const TensorView& out) {
  CheckContiguous(q, "attention queries");
  CheckContiguous(out, "attention output");
  const StepDescription& s = step();
  PagedAttentionParams ap;
  ap.num_tokens = s.num_tokens();
  ap.num_heads = a.num_heads;
  ap.num_kv_heads = a.num_kv_heads;
  ap.head_dim = a.head_dim;
  ap.block_size = cache.shape().block_size;
  ap.positions = s.positions.data();
  ap.block_tables = token_tables_.data();
  ap.scale = a.scale;
  ap.sliding_window = a.sliding_window;
  ap.q = q.f32();
  ap.out = out.f32();
  Storage(cache).FillAttentionParams(layer, &ap);
  // The plan of this step for this head layout, made by the first layer that needs it.
  PlanEntry* entry = nullptr;
  for (PlanEntry& e : attention_plans_) {
    if (e.serial == step_serial_ && e.plan.Fits(ap)) {
      entry = &e;
      break;
    }
  }
  if (entry == nullptr) {
    for (PlanEntry& e : attention_plans_) {
      if (e.serial != step_serial_) {
        entry = &e;
        break;
      }
    }
    if (entry == nullptr) entry = &attention_plans_.emplace_back();
    PlanPagedAttention(ap, &entry->plan);
    entry->serial = step_serial_;
    ++num_plans_;
  }
  pagoda::PagedAttention(ap, entry->plan);
}

void CpuBackend::MlaAttention(KVCache& cache, int64_t layer, int64_t num_heads, float scale, const TensorView& q,
                              const TensorView& out) {
  CheckContiguous(q, "MLA queries");
  CheckContiguous(out, "MLA output");
  const StepDescription& s = step();
  const KVStorageShape& cs = cache.shape();
  MlaAttentionParams p;
  p.q = q.f32();
  p.out = out.f32();
  p.num_tokens = s.num_tokens();
  p.num_heads = num_heads;
  p.kv_lora_rank = cs.head_dim;
  p.rope_dim = cs.head_dim_v;
  Storage(cache).FillMlaAttentionParams(layer, &p);  // caches, dtype, block size and formats
  p.positions = s.positions.data();
  p.block_tables = token_tables_.data();
  p.scale = scale;
  pagoda::MlaAttention(p);
}

void CpuBackend::Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) {
  CheckContiguous(x, "MoE input");
  CheckContiguous(y, "MoE output");
  PAGODA_CHECK(layer.impl != nullptr) << "CpuBackend::Moe: the layer was not prepared (PrepareMoe)";
  MoeForward(spec, *static_cast<const CpuMoeWeights*>(layer.impl.get()), x.f32(), x.rows, x.cols, y.f32());
}

void CpuBackend::CopyToHost(const TensorView& src, float* dst) {
  for (int64_t r = 0; r < src.rows; ++r) std::copy_n(src.f32() + r * src.row_stride, src.cols, dst + r * src.cols);
}

std::unique_ptr<SamplerState> CpuBackend::CreateSampler(const SamplingParams& params) {
  return std::make_unique<CpuSamplerState>(params);
}

void CpuBackend::Sample(const TensorView& logits, std::span<SampleRow> rows) {
  CheckF32(logits, "sampled logits");
  PAGODA_CHECK(logits.rows == static_cast<int64_t>(rows.size())) << "Sample: " << logits.rows << " rows of logits for "
                                                                  << rows.size() << " requests";
  std::vector<CpuSamplerState*> states(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    states[i] = dynamic_cast<CpuSamplerState*>(rows[i].state);
    PAGODA_CHECK(states[i] != nullptr) << "Sample: a sampler state the CPU backend did not make";
  }
  auto sample = [&](int64_t i) {
    SampleRow& r = rows[i];
    r.token = states[i]->sampler.Sample(std::span<float>(logits.f32() + i * logits.row_stride, logits.cols), r.prompt,
                                        r.output, r.logprobs);
  };
  // Rows of different requests (each its own generator, its own row and outputs) are sampled
  // in parallel: a drawn row sorts the whole vocabulary. Rows sharing a state keep row order.
  std::vector<CpuSamplerState*> sorted = states;
  std::sort(sorted.begin(), sorted.end());
  if (rows.size() > 1 && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
    ParallelForDynamic(static_cast<int64_t>(rows.size()), sample);
  } else {
    for (size_t i = 0; i < rows.size(); ++i) sample(static_cast<int64_t>(i));
  }
}

void CpuBackend::Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                          std::span<TokenLogprobs> out) {
  CheckF32(logits, "logprob logits");
  PAGODA_CHECK(logits.rows == static_cast<int64_t>(tokens.size()) && tokens.size() == out.size())
      << "Logprobs: " << logits.rows << " rows, " << tokens.size() << " tokens, " << out.size() << " outputs";
  for (size_t i = 0; i < tokens.size(); ++i) {
    out[i] = ComputeLogprobs(std::span<const float>(logits.f32() + i * logits.row_stride, logits.cols), tokens[i], k);
  }
}

}  // namespace pagoda
