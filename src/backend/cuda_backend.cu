#include "backend/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>

#include "backend/cuda_backend_state.cuh"
#include "backend/cuda_kv_cache.cuh"

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_wide.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sampling.h"

namespace pagoda {

void CudaBackend::EnableOpTimes(bool on) {
  s_->time_ops = on;
  s_->op_seconds.clear();
}
std::vector<std::pair<std::string, double>> CudaBackend::OpTimes() const { return s_->op_seconds; }
void CudaBackend::SetProfiling(bool on) {
  UseDevice(s_->device);
  PAGODA_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
}

CudaBackend::CudaBackend(int device) : s_(std::make_unique<State>()) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    ThrowUnsupported(std::string("no CUDA device: ") +
                     (e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none") +
                     " (--device cuda needs an NVIDIA GPU and its driver)");
  }
  PAGODA_ENSURE(device >= 0 && device < count, ErrorCode::kInvalidArgument,
                "CUDA device " << device << " does not exist (" << count << " found)");
  s_->device = device;
  PAGODA_CUDA_CHECK(cudaSetDevice(device));
  PAGODA_CUDA_CHECK(cudaFree(nullptr));  // the context exists before the baseline is read
  size_t free = 0, total = 0;
  PAGODA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  s_->free_at_start = static_cast<int64_t>(free);
  s_->graphs = std::make_unique<StepGraphs>();
  int* counters = s_->gemm_counters.Get<int>(cuda::kGemmMaxCounters);
  PAGODA_CUDA_CHECK(cudaMemset(counters, 0, cuda::kGemmMaxCounters * sizeof(int)));
  // PAGODA_CUDA_PDL=0 launches the decode kernels without programmatic dependent launch (the
  // benchmark's comparison; the results are the same bits either way).
  s_->gemm_pdl = cuda::EnvSwitch("PAGODA_CUDA_PDL", true);
  // PAGODA_CUDA_X_BF16=0: every GEMM converts its input itself (State::XBf16; the same bits).
  s_->x_bf16_on = cuda::EnvSwitch("PAGODA_CUDA_X_BF16", true);
  PAGODA_LOG(kInfo) << "CUDA backend on " << DeviceSummary();
}

CudaBackend::~CudaBackend() = default;

void CudaBackend::EnableStepGraphs(bool on) { s_->graphs->Enable(on); }

std::vector<int64_t> CudaBackend::DecodeGraphContexts(int64_t max_len, const KVCache& cache) const {
  std::vector<int64_t> contexts;
  const auto* c = dynamic_cast<const CudaKVCache*>(&cache);
  if (!s_->graphs->enabled() || c == nullptr || s_->host_waiting_caches.count(c->id()) > 0) return contexts;
  // Graphs are keyed by the split depth, which grows just past powers of two.
  int last = -1;
  for (int64_t keys = 1; keys <= max_len; keys = keys == 1 ? 2 : (keys - 1) * 2 + 1) {
    const int depth = cuda::FlashSplitDepth(keys);
    if (depth != last) contexts.push_back(keys);
    last = depth;
  }
  return contexts;
}
int64_t CudaBackend::num_step_graphs() const { return s_->graphs->size(); }

CudaBackend& DefaultCudaBackend() {
  static CudaBackend backend;  // a throwing constructor leaves it unmade: the next call retries
  return backend;
}

std::string CudaBackend::DeviceSummary() const {
  cudaDeviceProp prop{};
  PAGODA_CUDA_CHECK(cudaGetDeviceProperties(&prop, s_->device));
  std::ostringstream o;
  o << prop.name << " (sm_" << prop.major << prop.minor << ", " << prop.multiProcessorCount << " SMs, "
    << prop.totalGlobalMem / (1 << 20) << " MiB)";
  return o.str();
}

// ---- preparation ----

Weight CudaBackend::PrepareWeight(const WeightMatrix& w, WeightLayout) {
  return PrepareStacked(std::span<const WeightMatrix>(&w, 1), StackOrder::kConcat);
}

Weight CudaBackend::PrepareStacked(std::span<const WeightMatrix> parts, StackOrder order) {
  UseDevice(s_->device);
  Weight out;
  PAGODA_CHECK(!parts.empty()) << "PrepareStacked: no parts";
  // gate|up pairs need both parts' rows in whole groups of 16; otherwise the model runs them alone.
  if (order == StackOrder::kPairs16 &&
      (parts.size() != 2 || parts[0].rows != parts[1].rows || parts[0].rows % 16 != 0)) {
    return out;
  }
  out.dtype = parts[0].dtype;
  out.cols = parts[0].cols;
  for (const WeightMatrix& w : parts) {
    out.rows += w.rows;
    if (w.dtype != out.dtype) out.dtype = DType::kBF16;
  }
  if (out.rows == 0) return out;
  int64_t rounded = 0;
  auto p = UploadRows(parts, order, &rounded, &s_->uploaded_bytes);
  s_->max_k_padded = std::max(s_->max_k_padded, p->k_padded);
  s_->max_rows = std::max(s_->max_rows, p->rows);
  s_->max_partial_per_row = std::max(s_->max_partial_per_row, cuda::GemmBf16PartialFloats(1, p->rows, p->splits));
  ++s_->num_uploaded;
  if (p->dtype == DType::kBF16) ++s_->num_bf16;
  if (rounded > 0) {
    s_->num_dequantized += rounded;
    for (const WeightMatrix& w : parts) {
      if (w.dtype == DType::kF32 || w.dtype == DType::kBF16) continue;
      const std::string name(DTypeName(w.dtype));
      if (s_->dequantized_types.find(name) == std::string::npos) {
        s_->dequantized_types += (s_->dequantized_types.empty() ? "" : ", ") + name;
      }
    }
  }
  out.impl = std::move(p);
  return out;
}

PreparedVector CudaBackend::PrepareVector(std::span<const float> v) {
  UseDevice(s_->device);
  PreparedVector out;
  auto owner = DeviceAlloc(v.size() * sizeof(float));
  if (!v.empty()) PAGODA_CUDA_CHECK(cudaMemcpy(owner.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  out.view = TensorView::F32(static_cast<float*>(owner.get()), 1, static_cast<int64_t>(v.size()), Device::kCuda);
  out.owner = std::move(owner);
  return out;
}

void CudaBackend::LogPrepared(std::string_view model_name) {
  if (s_->num_uploaded > 0) {
    PAGODA_LOG(kInfo) << model_name << ": uploaded " << s_->num_uploaded << " weight matrices to the GPU ("
                      << s_->uploaded_bytes / (1 << 20) << " MiB; " << s_->num_bf16
                      << " bf16 on tensor cores, " << s_->num_uploaded - s_->num_bf16 << " f32 without TF32)";
  }
  if (s_->num_dequantized > 0) {
    PAGODA_LOG(kInfo) << model_name << ": " << s_->num_dequantized << " matrices (" << s_->dequantized_types
                      << ") rounded to bf16 at load for the CUDA backend";
  }
  s_->num_uploaded = s_->num_bf16 = s_->num_dequantized = s_->uploaded_bytes = 0;
  s_->dequantized_types.clear();
}

// ---- memory ----

std::shared_ptr<float> CudaBackend::Allocate(int64_t floats) {
  UseDevice(s_->device);
  s_->graphs->Drop();
  std::shared_ptr<void> p = DeviceAlloc(static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float));
  return std::shared_ptr<float>(p, static_cast<float*>(p.get()));
}

std::unique_ptr<KVCache> CudaBackend::CreateKVCache(const KVStorageShape& shape) {
  UseDevice(s_->device);
  s_->graphs->Drop();
  KVCacheSupport support;
  support.wide_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  // Per-token fp8, int8, int4 and nvfp4 (kernels/cuda/kv_codec.cuh), with
  // --kv-cache-dtype-skip-layers and checkpoint scales; with the side pool (cuda_kv_cache.cuh)
  // kivi2, --kv-sink-tokens and --kv-recent-tokens. The query-aware policy is not on the GPU.
  support.formats = {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8,
                     KVQuant::kInt4,    KVQuant::kNvfp4,   KVQuant::kKivi2};
  support.heavy_tokens = false;
  CheckKVCacheSupport(shape, support, name());
  if (shape.quant != KVQuant::kNone) {
    PAGODA_ENSURE(shape.quantize_v, ErrorCode::kUnsupported,
                  "the cuda backend has no quantized MLA latent cache yet (--kv-cache-dtype "
                      << KVQuantName(shape.quant) << "); use bf16 KV for this model on the GPU");
    const int64_t dv = shape.head_dim_v > 0 ? shape.head_dim_v : shape.head_dim;
    PAGODA_ENSURE(shape.head_dim <= 512 && dv <= 512, ErrorCode::kUnsupported,
                  "the cuda backend quantizes KV rows of at most 512 values, not " << std::max(shape.head_dim, dv));
    PAGODA_ENSURE(shape.head_dim % 2 == 0 && dv % 2 == 0, ErrorCode::kUnsupported,
                  "the cuda backend quantizes KV rows of an even number of values, not " << shape.head_dim);
    if (shape.quant == KVQuant::kInt4) {  // read by FlashAttention only (kernels/cuda/flash_attention.h)
      const int64_t g = std::min(shape.group_size, shape.head_dim);
      PAGODA_ENSURE((shape.head_dim == 64 || shape.head_dim == 128) && dv == shape.head_dim && g > 0 && g % 8 == 0 &&
                        shape.head_dim % g == 0,
                    ErrorCode::kUnsupported,
                    "the cuda backend keeps int4 KV for head dims 64 and 128 with --kv-quant-group-size a multiple of 8 "
                    "dividing the head dim (here head dim "
                        << shape.head_dim << ", groups of " << g << "); use --kv-cache-dtype int8 or fp8");
    }
    if (shape.quant == KVQuant::kKivi2) {  // kernels/cuda/kv_wide.h, kv_codec.cuh
      PAGODA_ENSURE(shape.head_dim % 8 == 0 && dv % 8 == 0, ErrorCode::kUnsupported,
                    "the cuda backend keeps kivi2 KV for head dims that are multiples of 8, not "
                        << shape.head_dim << "/" << dv << "; use --kv-cache-dtype int4 or int8");
    }
    if (shape.quant == KVQuant::kNvfp4) {  // read by FlashAttention only
      PAGODA_ENSURE((shape.head_dim == 64 || shape.head_dim == 128) && dv == shape.head_dim, ErrorCode::kUnsupported,
                    "the cuda backend keeps nvfp4 KV for head dims 64 and 128 (here "
                        << shape.head_dim << "/" << dv << "); use --kv-cache-dtype int8 or fp8");
    }
  }
  return std::make_unique<CudaKVCache>(shape);
}

void CudaBackend::ReserveScratch(int64_t max_tokens, int64_t max_logits) {
  UseDevice(s_->device);
  State& s = *s_;
  s.gemm_x.Get<uint16_t>(max_tokens * s.max_k_padded);
  // The fused SiLU's bf16 output (State::XBf16).
  s.gemm_x2.Get<uint16_t>(std::min(max_tokens, cuda::kGemmFusedSiluMaxRows) * s.max_k_padded);
  // Split-k partial sums: planes of at most kGemmPartialMaxRows rows (kernels/cuda/gemm.h).
  s.gemm_partial.Get<float>(std::min<int64_t>(max_tokens, cuda::kGemmPartialMaxRows) * s.max_partial_per_row +
                            cuda::kGemmSplitKLockFloats);
  s.staging.Get<float>(max_logits * s.max_rows);
  // The step's inputs (BeginStep) at their largest: a later step never moves them, which would
  // drop every captured graph (the block table grows with the contexts instead).
  const void* before[] = {s.token_ids.ptr.get(), s.positions.ptr.get(), s.slots.ptr.get(), s.token_tables.ptr.get(),
                          s.logits_index.ptr.get()};
  s.token_ids.Reserve<int32_t>(max_tokens);
  s.positions.Reserve<int32_t>(max_tokens);
  s.slots.Reserve<int64_t>(max_tokens);
  s.token_tables.Reserve<const int32_t*>(max_tokens);
  s.logits_index.Reserve<int32_t>(max_logits);
  const void* after[] = {s.token_ids.ptr.get(), s.positions.ptr.get(), s.slots.ptr.get(), s.token_tables.ptr.get(),
                         s.logits_index.ptr.get()};
  if (!std::equal(std::begin(before), std::end(before), std::begin(after))) s.graphs->Drop();  // they read the old ones
  // The device sampler's sort buffers (at most 192 MiB), before the KV cache takes the rest.
  if (max_logits > 0 && s.max_rows > 0) {
    s.sample_scratch.Get<char>(static_cast<int64_t>(cuda::SampleScratchBytes(max_logits, s.max_rows)));
  }
}

CudaBackend::MemoryInfo CudaBackend::DeviceMemory() const {
  UseDevice(s_->device);
  size_t free = 0, total = 0;
  PAGODA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // What this backend took: the drop in free memory since it started (memory other processes
  // take meanwhile is counted too, which only errs on the safe side).
  return {static_cast<int64_t>(total), std::max<int64_t>(0, s_->free_at_start - static_cast<int64_t>(free)),
          s_->free_at_start};
}

void CudaBackend::CopyBlock(KVCache& cache, int32_t src, int32_t dst) {
  ++s_->op_serial;  // writes device memory (State::XBf16)
  UseDevice(s_->device);
  CudaKVCache& c = AsCudaKVCache(cache);
  PAGODA_CHECK(src >= 0 && dst >= 0 && src < c.shape().num_blocks && dst < c.shape().num_blocks)
      << "CopyBlock " << src << " -> " << dst;
  for (int64_t l = 0; l < c.shape().num_layers; ++l) {
    auto* k = static_cast<char*>(c.k(l));
    auto* v = static_cast<char*>(c.v(l));
    const int64_t kb = c.k_block_bytes(l), vb = c.v_block_bytes(l);
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(k + dst * kb, k + src * kb, kb, cudaMemcpyDeviceToDevice, s_->stream));
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(v + dst * vb, v + src * vb, vb, cudaMemcpyDeviceToDevice, s_->stream));
  }
  bool moved = false;
  c.CopyWideBlock(src, dst, s_->stream, &moved);
  if (moved) s_->graphs->Drop();
}

std::vector<uint8_t> CudaBackend::ReadKVBlock(KVCache& cache, int64_t layer, bool value, int32_t block) {
  UseDevice(s_->device);
  CudaKVCache& c = AsCudaKVCache(cache);
  PAGODA_CHECK(layer >= 0 && layer < c.shape().num_layers && block >= 0 && block < c.shape().num_blocks)
      << "ReadKVBlock: layer " << layer << ", block " << block;
  const int64_t bytes = value ? c.v_block_bytes(layer) : c.k_block_bytes(layer);
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  const auto* base = static_cast<const uint8_t*>(value ? c.v(layer) : c.k(layer));
  PAGODA_CUDA_CHECK(cudaMemcpy(out.data(), base + block * bytes, bytes, cudaMemcpyDeviceToHost));
  return out;
}

// ---- one step ----

void CudaBackend::BeginStep(const StepDescription& step, KVCache& cache) {
  UseDevice(s_->device);
  OpTimer timer(s_.get(), "BeginStep");
  PAGODA_CHECK(step.block_size == cache.shape().block_size)
      << "step made for block size " << step.block_size << ", cache has " << cache.shape().block_size;
  State& s = *s_;
  s.graphs->AbandonStaleCapture();
  s.step = &step;
  const int64_t n = step.num_tokens();
  // A captured graph reads the step's inputs at the addresses it was captured with: when one
  // of these buffers moves (a longer step, a wider block table as contexts grow), every graph
  // is dropped and recaptured.
  bool moved = false;
  s.token_ids.UploadGrowing(step.token_ids.data(), n, &moved);
  s.positions.UploadGrowing(step.positions.data(), n, &moved);
  s.slots.UploadGrowing(step.slot_mapping.data(), n, &moved);
  const int32_t* table =
      s.block_table.UploadGrowing(step.block_table.data(), static_cast<int64_t>(step.block_table.size()), &moved);
  s.host_token_tables.resize(n);
  for (int64_t seq = 0; seq < step.num_seqs(); ++seq) {
    for (int32_t t = step.query_start_loc[seq]; t < step.query_start_loc[seq + 1]; ++t) {
      s.host_token_tables[t] = table + seq * step.max_blocks_per_seq;
    }
  }
  s.token_tables.UploadGrowing(s.host_token_tables.data(), n, &moved);
  s.max_keys = 0;
  for (int32_t pos : step.positions) s.max_keys = std::max<int64_t>(s.max_keys, pos + 1);
  s.logits_index.UploadGrowing(step.logits_indices.data(), step.num_logits(), &moved);
  // The side pool's plan for the step's writes (kivi2, sink and recent tokens), on the legacy
  // stream as the uploads above.
  AsCudaKVCache(cache).PlanWideStep(step, nullptr, &moved);
  if (moved) s.graphs->Drop();
  ++s.step_serial;

  // A decode step (one token and one logits row per sequence) may run as a graph.
  const bool decode = n > 0 && step.num_seqs() == n && step.num_logits() == n;
  // The attention's split grid grows with the context: a graph per depth (a few powers of two).
  s.step_cache_id = AsCudaKVCache(cache).id();
  const bool waits_on_host = s.host_waiting_caches.count(s.step_cache_id) > 0;
  s.stream = s.graphs->Begin(n, &cache, decode && !waits_on_host, cuda::FlashSplitDepth(s.max_keys));
}

void CudaBackend::Embedding(const Weight& table, const TensorView& out) {
  OpTimer timer(s_.get(), "Embedding");
  CheckF32(out, "embedding output");
  PAGODA_CHECK(s_->step != nullptr) << "CudaBackend: an op before BeginStep";
  const StepDescription& step = *s_->step;
  const CudaWeight& w = Impl(table);
  PAGODA_CHECK(out.cols == w.cols) << "Embedding: table rows of " << w.cols << " values, output of " << out.cols;
  for (int32_t id : step.token_ids) {
    PAGODA_ENSURE(id >= 0 && id < w.rows, ErrorCode::kInvalidArgument,
                  "token id " << id << " is outside the vocabulary (size " << w.rows << ")");
  }
  if (s_->graphs->replaying()) return;  // the step's graph does it
  if (w.dtype == DType::kF32) {
    cuda::GatherRows(w.f32(), w.cols, s_->token_ids.Get<int32_t>(0), step.num_tokens(), out.cols, out.f32(),
                     out.row_stride, s_->stream);
  } else {
    cuda::GatherRowsBf16(w.bf16(), w.k_padded, s_->token_ids.Get<int32_t>(0), step.num_tokens(), out.cols,
                         out.f32(), out.row_stride, s_->stream);
  }
}

void CudaBackend::MatMul(const Weight& weight, const TensorView& x, const TensorView& y, const Epilogue& ep) {
  OpTimer timer(s_.get(), "MatMul");
  CheckF32(x, "MatMul input");
  const CudaWeight& w = Impl(weight);
  State& s = *s_;
  switch (ep.kind) {
    case Epilogue::Kind::kNone:
      if (y.data != nullptr && y.data == s.staging.ptr.get()) {
        // LogitsBuffer: the end of a step whose logits stay here. A captured step ends its graph
        // and launches it, a replayed one just launches; nothing is copied.
        if (!s.graphs->replaying()) s.Gemm(w, x, y.f32(), y.row_stride, false, nullptr, 0, s.TakeXBf16(x, w.k_padded));
        s.graphs->Finish(nullptr, 0, nullptr, 0, 0, 0);
        s.stream = nullptr;
      } else if (IsDevicePointer(y.data)) {
        if (s.graphs->replaying()) return;
        s.Gemm(w, x, y.f32(), y.row_stride, false, nullptr, 0, s.TakeXBf16(x, w.k_padded));
      } else {
        // Host rows: the logits the engine hands in, the end of a step. Through device scratch;
        // a captured step ends its graph here and launches it, a replayed one just launches.
        if (static_cast<size_t>(x.rows * w.rows) * sizeof(float) > s.staging.bytes) s.graphs->Drop();
        float* d = s.staging.Get<float>(x.rows * w.rows);
        if (!s.graphs->replaying()) s.Gemm(w, x, d, w.rows, false, nullptr, 0, s.TakeXBf16(x, w.k_padded));
        s.graphs->Finish(y.data, y.row_stride * sizeof(float), d, w.rows * sizeof(float), w.rows * sizeof(float),
                         x.rows);
        s.stream = nullptr;
      }
      return;
    case Epilogue::Kind::kAddTo:
      if (s.graphs->replaying()) return;
      s.Gemm(w, x, ep.out.f32(), ep.out.row_stride, true, nullptr, 0, s.TakeXBf16(x, w.k_padded));
      return;
    case Epilogue::Kind::kSiluMulPairs:
      if (s.graphs->replaying()) return;
      s.Gemm(w, x, y.f32(), y.row_stride, false, ep.out.f32(), ep.out.row_stride, s.TakeXBf16(x, w.k_padded));
      return;
  }
}

void CudaBackend::RmsNorm(const TensorView& x, const TensorView& weight, double eps, const TensorView& y) {
  OpTimer timer(s_.get(), "RmsNorm");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  CheckF32(x, "RmsNorm input");
  RmsNormParams p;
  p.x = x.f32();
  p.weight = weight.f32();
  p.y = y.f32();
  p.rows = x.rows;
  p.cols = x.cols;
  p.x_stride = x.row_stride;
  p.y_stride = y.row_stride;
  p.eps = eps;
  State& s = *s_;
  if (s.x_bf16_on && cuda::GemmConvertsX(p.rows)) {
    // The next GEMM's input in bf16 too (State::XBf16).
    p.y_bf16 = s.gemm_x.Get<uint16_t>(p.rows * p.cols);
    s.x_bf16 = State::XBf16{p.y, p.y_bf16, p.rows, p.cols, s.op_serial};
  }
  cuda::RmsNorm(p, s.stream, s.gemm_pdl && p.rows <= kPdlMaxRows);
}

void CudaBackend::AddBias(const TensorView& bias, const TensorView& x) {
  OpTimer timer(s_.get(), "AddBias");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  cuda::AddBiasRows(bias.f32(), x.f32(), x.row_stride, x.rows, x.cols, s_->stream);
}

void CudaBackend::Add(const TensorView& y, const TensorView& x) {
  OpTimer timer(s_.get(), "Add");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  cuda::AddRows(y.f32(), y.row_stride, x.f32(), x.row_stride, x.rows, x.cols, s_->stream);
}

void CudaBackend::SiluMul(const TensorView& gate, const TensorView& up, const TensorView& out) {
  OpTimer timer(s_.get(), "SiluMul");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  cuda::SiluMulRows(gate.f32(), gate.row_stride, up.f32(), up.row_stride, out.f32(), out.row_stride, out.rows,
                    out.cols, s_->stream);
}

void CudaBackend::Copy(const TensorView& src, const TensorView& dst) {
  OpTimer timer(s_.get(), "Copy");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  PAGODA_CHECK(src.rows == dst.rows && src.cols == dst.cols) << "CudaBackend::Copy: shapes differ";
  cuda::CopyRows(src.f32(), src.row_stride, dst.f32(), dst.row_stride, src.rows, src.cols, s_->stream);
}

void CudaBackend::GatherLogitRows(const TensorView& x, const TensorView& out) {
  OpTimer timer(s_.get(), "GatherLogitRows");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  PAGODA_CHECK(s_->step != nullptr) << "CudaBackend: an op before BeginStep";
  for (int32_t t : s_->step->logits_indices) PAGODA_CHECK(t >= 0 && t < x.rows) << "logits index " << t;
  cuda::GatherRows(x.f32(), x.row_stride, s_->logits_index.Get<int32_t>(0), s_->step->num_logits(), x.cols,
                   out.f32(), out.row_stride, s_->stream);
}

void CudaBackend::Rope(const RopeParams& rope, const TensorView& x, int64_t num_heads, int64_t head_stride,
                       int64_t offset) {
  OpTimer timer(s_.get(), "Rope");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  PAGODA_CHECK(s_->step != nullptr) << "CudaBackend: an op before BeginStep";
  RopeApplyParams p;
  p.x = x.f32();
  p.positions = s_->positions.Get<int32_t>(0);
  p.inv_freq = s_->RopeTable(rope);
  p.num_tokens = x.rows;
  p.num_heads = num_heads;
  p.head_stride = head_stride;
  p.row_stride = x.row_stride;
  p.offset = offset;
  p.dim = rope.dim;
  p.interleaved = rope.interleaved;
  p.magnitude = rope.magnitude;
  cuda::ApplyRope(p, s_->stream);
}

void CudaBackend::WriteKV(KVCache& cache, int64_t layer, const TensorView& k, const TensorView& v) {
  OpTimer timer(s_.get(), "WriteKV");
  if (s_->graphs->replaying()) return;  // the step's graph does it
  CudaKVCache& c = AsCudaKVCache(cache);
  PAGODA_CHECK(k.cols == c.k_width() && v.cols == c.v_width())
      << "WriteKV: rows of " << k.cols << "/" << v.cols << " values, cache holds " << c.k_width() << "/" << c.v_width();
  KVWriteParams p;
  p.k = k.f32();
  p.v = v.f32();
  p.slot_mapping = s_->slots.Get<int64_t>(0);
  p.num_tokens = k.rows;
  p.k_width = k.cols;
  p.v_width = v.cols;
  p.k_stride = k.row_stride;
  p.v_stride = v.row_stride;
  p.k_cache = c.k(layer);
  p.v_cache = c.v(layer);
  p.dtype = c.shape().dtype;
  p.k_format = c.k_format(layer);
  p.v_format = c.v_format(layer);
  cuda::WriteKV(p, s_->stream);
  if (!c.uses_wide(layer)) return;
  cuda::KVWideWriteParams w;
  w.k = p.k;
  w.v = p.v;
  w.k_stride = p.k_stride;
  w.v_stride = p.v_stride;
  w.num_tokens = p.num_tokens;
  w.k_width = p.k_width;
  w.v_width = p.v_width;
  w.wide_rows = c.wide_rows();
  w.k_wide = c.k_wide(layer);
  w.v_wide = c.v_wide(layer);
  w.dtype = c.shape().dtype;
  cuda::WriteWideRows(w, s_->stream);
  if (c.k_format(layer).per_channel) {  // kivi2 keys of the blocks this step filled
    cuda::Kivi2KeysParams q;
    q.fill_blocks = c.fill_blocks();
    q.num_tokens = p.num_tokens;
    q.wide_index = c.wide_index();
    q.k_wide = c.k_wide(layer);
    q.dtype = c.shape().dtype;
    q.k_cache = c.k(layer);
    q.k_block_bytes = c.k_block_bytes(layer);
    q.k_format = c.k_format(layer);
    cuda::QuantizeFilledKivi2Keys(q, s_->stream);
  }
}


void CudaBackend::AllReduce(const TensorView& x) {
  ++s_->op_serial;  // writes device memory (State::XBf16)
  Communicator* comm = communicator();
  if (comm == nullptr || comm->size() == 1 || x.rows == 0 || x.cols == 0) return;
  if (s_->graphs->replaying()) return;  // the step's graph does it
  if (x.contiguous()) {
    comm->AllReduceSumOnDevice(x.f32(), x.rows * x.cols, s_->stream);
    return;
  }
  for (int64_t r = 0; r < x.rows; ++r) comm->AllReduceSumOnDevice(x.f32() + r * x.row_stride, x.cols, s_->stream);
}

void CudaBackend::CopyToHost(const TensorView& src, float* dst) {
  if (src.rows == 0 || src.cols == 0) return;
  PAGODA_CUDA_CHECK(cudaMemcpy2D(dst, src.cols * sizeof(float), src.data, src.row_stride * sizeof(float),
                                 src.cols * sizeof(float), src.rows, cudaMemcpyDeviceToHost));
}

void CudaBackend::Upload(const float* src, const TensorView& dst) {
  ++s_->op_serial;  // writes device memory (State::XBf16)
  if (dst.rows == 0 || dst.cols == 0) return;
  PAGODA_CUDA_CHECK(cudaMemcpy2D(dst.data, dst.row_stride * sizeof(float), src, dst.cols * sizeof(float),
                                 dst.cols * sizeof(float), dst.rows, cudaMemcpyHostToDevice));
}

void CudaBackend::Fill(const TensorView& dst, float value) {
  ++s_->op_serial;  // writes device memory (State::XBf16)
  cuda::FillRows(dst.f32(), dst.row_stride, dst.rows, dst.cols, value, s_->stream);
}

void CudaBackend::Synchronize() {
  UseDevice(s_->device);
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace pagoda
