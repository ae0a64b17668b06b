#include "backend/tensor_parallel_backend.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace pagoda {
namespace {

[[noreturn]] void NotHere(const char* op) {
  ThrowError(ErrorCode::kInternal, std::string("TensorParallelBackend::") + op +
                                       ": a step's ops run on the ranks' backends (TensorParallelModel)");
}

TensorParallelKVCache& Composite(KVCache& cache) {
  auto* c = dynamic_cast<TensorParallelKVCache*>(&cache);
  PAGODA_CHECK(c != nullptr) << "the KV cache was not made by the tensor-parallel backend";
  return *c;
}

}  // namespace

TensorParallelKVCache::TensorParallelKVCache(const KVStorageShape& shape, std::vector<std::unique_ptr<KVCache>> ranks)
    : shape_(shape), ranks_(std::move(ranks)) {}

int64_t TensorParallelKVCache::bytes() const {
  int64_t total = 0;
  for (const auto& r : ranks_) total += r->bytes();
  return total;
}

int64_t TensorParallelKVCache::side_bytes() const {
  int64_t total = 0;
  for (const auto& r : ranks_) total += r->side_bytes();
  return total;
}

void TensorParallelKVCache::SetTensorScales(int64_t layer, float k_scale, float v_scale) {
  for (auto& r : ranks_) r->SetTensorScales(layer, k_scale, v_scale);
}

void TensorParallelKVCache::ReleaseBlocks(std::span<const int32_t> blocks) {
  for (auto& r : ranks_) r->ReleaseBlocks(blocks);
}

TensorParallelBackend::TensorParallelBackend(std::vector<Backend*> ranks) : ranks_(std::move(ranks)) {
  PAGODA_CHECK(!ranks_.empty()) << "TensorParallelBackend: no ranks";
}

Weight TensorParallelBackend::PrepareWeight(const WeightMatrix&, WeightLayout) { NotHere("PrepareWeight"); }
Weight TensorParallelBackend::PrepareStacked(std::span<const WeightMatrix>, StackOrder) { NotHere("PrepareStacked"); }
void TensorParallelBackend::PrepareMoe(MoeLayer*) { NotHere("PrepareMoe"); }
PreparedVector TensorParallelBackend::PrepareVector(std::span<const float>) { NotHere("PrepareVector"); }
void TensorParallelBackend::LogPrepared(std::string_view) {}

std::shared_ptr<float> TensorParallelBackend::Allocate(int64_t floats) { return ranks_[0]->Allocate(floats); }

std::unique_ptr<KVCache> TensorParallelBackend::CreateKVCache(const KVStorageShape& shape) {
  const int64_t n = size();
  PAGODA_CHECK(shape.num_kv_heads % n == 0 || n % shape.num_kv_heads == 0)
      << "tensor parallelism: " << shape.num_kv_heads << " KV heads over " << n << " ranks";
  std::vector<std::unique_ptr<KVCache>> ranks;
  for (int r = 0; r < n; ++r) {
    KVStorageShape s = shape;
    s.num_kv_heads = std::max<int64_t>(1, shape.num_kv_heads / n);  // replicated when fewer than ranks
    ranks.push_back(ranks_[r]->CreateKVCache(s));
  }
  return std::make_unique<TensorParallelKVCache>(shape, std::move(ranks));
}

void TensorParallelBackend::CopyBlock(KVCache& cache, int32_t src, int32_t dst) {
  TensorParallelKVCache& c = Composite(cache);
  for (int r = 0; r < size(); ++r) ranks_[r]->CopyBlock(c.rank(r), src, dst);
}

void TensorParallelBackend::EnableStepGraphs(bool on) {
  for (Backend* b : ranks_) b->EnableStepGraphs(on);
}

Backend::MemoryInfo TensorParallelBackend::DeviceMemory() const {
  // Every rank's device together: the KV budget is then the sum of the ranks' budgets, and the
  // cache's bytes per token count every rank's share (Model::KVCopies for replicated heads).
  MemoryInfo sum;
  for (const Backend* b : ranks_) {
    const MemoryInfo m = b->DeviceMemory();
    sum.total += m.total;
    sum.used += m.used;
    sum.free_at_start += m.free_at_start;
  }
  return sum;
}

void TensorParallelBackend::BeginStep(const StepDescription&, KVCache&) { NotHere("BeginStep"); }
void TensorParallelBackend::Embedding(const Weight&, const TensorView&) { NotHere("Embedding"); }
void TensorParallelBackend::MatMul(const Weight&, const TensorView&, const TensorView&, const Epilogue&) {
  NotHere("MatMul");
}
void TensorParallelBackend::RmsNorm(const TensorView&, const TensorView&, double, const TensorView&) {
  NotHere("RmsNorm");
}
void TensorParallelBackend::AddBias(const TensorView&, const TensorView&) { NotHere("AddBias"); }
void TensorParallelBackend::Add(const TensorView&, const TensorView&) { NotHere("Add"); }
void TensorParallelBackend::SiluMul(const TensorView&, const TensorView&, const TensorView&) { NotHere("SiluMul"); }
void TensorParallelBackend::Copy(const TensorView&, const TensorView&) { NotHere("Copy"); }
void TensorParallelBackend::GatherLogitRows(const TensorView&, const TensorView&) { NotHere("GatherLogitRows"); }
void TensorParallelBackend::Rope(const RopeParams&, const TensorView&, int64_t, int64_t, int64_t) { NotHere("Rope"); }
void TensorParallelBackend::WriteKV(KVCache&, int64_t, const TensorView&, const TensorView&) { NotHere("WriteKV"); }
void TensorParallelBackend::ObserveQueries(KVCache&, int64_t, const TensorView&, int64_t, float) {
  NotHere("ObserveQueries");
}
void TensorParallelBackend::PagedAttention(KVCache&, int64_t, const AttentionLayer&, const TensorView&,
                                           const TensorView&) {
  NotHere("PagedAttention");
}
void TensorParallelBackend::MlaAttention(KVCache&, int64_t, int64_t, float, const TensorView&, const TensorView&) {
  NotHere("MlaAttention");
}
void TensorParallelBackend::Moe(const MoeSpec&, const MoeLayer&, const TensorView&, const TensorView&) {
  NotHere("Moe");
}

void TensorParallelBackend::CopyToHost(const TensorView& src, float* dst) { ranks_[0]->CopyToHost(src, dst); }
std::unique_ptr<SamplerState> TensorParallelBackend::CreateSampler(const SamplingParams& params) {
  return ranks_[0]->CreateSampler(params);
}
void TensorParallelBackend::Sample(const TensorView& logits, std::span<SampleRow> rows) {
  ranks_[0]->Sample(logits, rows);
}
void TensorParallelBackend::Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                                     std::span<TokenLogprobs> out) {
  ranks_[0]->Logprobs(logits, tokens, k, out);
}

}  // namespace pagoda
