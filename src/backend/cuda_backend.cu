#include "backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>

#include "backend/cuda_kv_cache.cuh"
#include "backend/cuda_memory.cuh"
#include "backend/cuda_step_graphs.cuh"
#include "backend/cuda_weights.cuh"

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/attention_inputs.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/mla_attention.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope.h"

namespace pagoda {
namespace {

struct CudaMoe {
  std::vector<float> score_bias;  // host copy for the host-side routing
  // The router in f32 (bf16 values widened exactly), multiplied with f32 activations as the
  // reference implementations do: a bf16 rounding of the activations could flip a near tie
  // between experts and change the layer's output wholesale.
  CudaWeight router_f32;
};

void CheckF32(const TensorView& v, const char* what) {
  PAGODA_CHECK(v.dtype == DType::kF32) << "CudaBackend: " << what << " is not f32";
}

}  // namespace

struct CudaBackend::State {
  int device = 0;
  int64_t free_at_start = 0;  // device memory free when the backend started (DeviceMemory)
  // Where ops launch: the legacy default stream (ordered with the synchronous copies), or the
  // graphs' stream while a decode step is being captured.
  cudaStream_t stream = nullptr;
  std::unique_ptr<StepGraphs> graphs;  // made once the device is selected
  bool has_moe = false;  // MoE routing waits on the host mid-step: no step graphs

  // Per-op device time (EnableOpTimes): each op synchronizes before and after itself.
  bool time_ops = false;
  std::vector<std::pair<std::string, double>> op_seconds;
  void AddOpTime(const char* name, double seconds) {
    for (auto& [n, t] : op_seconds) {
      if (n == name) {
        t += seconds;
        return;
      }
    }
    op_seconds.emplace_back(name, seconds);
  }

  // The current step, uploaded.
  const StepDescription* step = nullptr;
  DeviceScratch token_ids, positions, slots, block_table, token_tables, logits_index;
  std::vector<const int32_t*> host_token_tables;

  DeviceScratch staging;  // MatMul outputs that live on the host; LogitsBuffer
  DeviceScratch sampled_ids;  // greedy choices on the device
  DeviceScratch gemm_x, gemm_partial;  // bf16 copies of GEMM inputs; split-k partial sums
  DeviceScratch attention_partial;     // split-KV partial outputs
  int64_t max_keys = 0;                // the most keys a token of the step attends to
  // FlashAttention's wide work items for the current step (made on its first layer).
  int64_t step_serial = 0, flash_items_serial = -1, flash_items_per_item = 0, num_flash_items = 0;
  DeviceScratch flash_items;

  struct RopeEntry {
    std::vector<double> inv_freq;
    DeviceScratch device;
  };
  std::vector<RopeEntry> ropes;
  // inv_freq on the device, uploaded once per distinct table.
  const double* RopeTable(const RopeParams& rope) {
    for (RopeEntry& e : ropes) {
      if (e.inv_freq == rope.inv_freq) return e.device.Get<double>(0);
    }
    RopeEntry& e = ropes.emplace_back();
    e.inv_freq = rope.inv_freq;
    return e.device.Upload(rope.inv_freq.data(), static_cast<int64_t>(rope.inv_freq.size()));
  }

  // MoE scratch (host routing).
  DeviceScratch moe_logits, moe_x, moe_gate, moe_up, moe_y, moe_out, moe_rows, moe_dest, moe_weights;
  std::vector<float> host_logits, host_weights;
  std::vector<int32_t> host_ids, host_rows, host_dest;
  std::vector<int64_t> starts, fill;

  // The largest GEMM operands prepared so far (ReserveScratch sizes the GEMM scratch from them).
  int64_t max_k_padded = 0, max_rows = 0, max_partial_per_row = 0;

  // Preparation statistics since the last LogPrepared.
  int64_t num_uploaded = 0, num_bf16 = 0, num_dequantized = 0, uploaded_bytes = 0;
  std::string dequantized_types;

  void Gemm(const CudaWeight& w, const TensorView& x, float* y, int64_t y_stride, bool accumulate) {
    PAGODA_CHECK(x.cols == w.cols) << "CudaBackend::MatMul: x has " << x.cols << " columns, W " << w.cols;
    if (w.dtype == DType::kF32) {
      cuda::GemmF32(x.f32(), x.row_stride, x.rows, w.f32(), w.rows, w.cols, y, y_stride, accumulate, stream);
      return;
    }
    cuda::GemmBf16Params p;
    p.x = x.f32();
    p.x_stride = x.row_stride;
    p.m = x.rows;
    p.n = w.rows;
    p.k = w.cols;
    p.w = w.bf16();
    p.k_padded = w.k_padded;
    p.splits = w.splits;
    p.y = y;
    p.y_stride = y_stride;
    p.accumulate = accumulate;
    p.xb = gemm_x.Get<uint16_t>(x.rows * w.k_padded);
    const int64_t partial = cuda::GemmBf16PartialFloats(x.rows, w.rows, w.splits);
    p.partial = partial > 0 ? gemm_partial.Get<float>(partial) : nullptr;
    cuda::GemmBf16(p, stream);
  }
  // y = down(silu(gate x) * up x) over x [m, dim] -> y [m, dim] contiguous.
  void SwiGlu(const Weight& gate, const Weight& up, const Weight& down, const TensorView& x, float* y) {
    const CudaWeight &g = Impl(gate), &u = Impl(up), &d = Impl(down);
    const int64_t m = x.rows, ffn = g.rows;
    float* gb = moe_gate.Get<float>(m * ffn);
    float* ub = moe_up.Get<float>(m * ffn);
    Gemm(g, x, gb, ffn, false);
    Gemm(u, x, ub, ffn, false);
    cuda::SiluMulRows(gb, ffn, ub, ffn, gb, ffn, m, ffn, stream);
    Gemm(d, TensorView::F32(gb, m, ffn, Device::kCuda), y, d.rows, false);
  }
};

namespace {
// Tensor parallelism drives one CudaBackend per GPU from several threads: every entry point
// that allocates or launches first makes this backend's GPU the calling thread's.
void UseDevice(int device) { PAGODA_CUDA_CHECK(cudaSetDevice(device)); }

// Times one op when op timing is on (synchronizing around it), else does nothing.
class OpTimer {
 public:
  OpTimer(CudaBackend::State* s, const char* name) : s_(s->time_ops ? s : nullptr), name_(name) {
    if (s_ == nullptr) return;
    PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
    start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (s_ == nullptr) return;
    (void)cudaDeviceSynchronize();
    s_->AddOpTime(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  CudaBackend::State* s_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

void CudaBackend::EnableOpTimes(bool on) {
  s_->time_ops = on;
  s_->op_seconds.clear();
}
std::vector<std::pair<std::string, double>> CudaBackend::OpTimes() const { return s_->op_seconds; }

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
  PAGODA_LOG(kInfo) << "CUDA backend on " << DeviceSummary();
}

CudaBackend::~CudaBackend() = default;

void CudaBackend::EnableStepGraphs(bool on) { s_->graphs->Enable(on); }
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

void CudaBackend::PrepareMoe(MoeLayer* layer) {
  UseDevice(s_->device);
  s_->has_moe = true;
  auto m = std::make_shared<CudaMoe>();
  if (!layer->score_bias.empty()) {
    const TensorView& v = layer->score_bias.view;
    m->score_bias.resize(v.cols);
    PAGODA_CUDA_CHECK(cudaMemcpy(m->score_bias.data(), v.data, v.cols * sizeof(float), cudaMemcpyDeviceToHost));
  }
  m->router_f32 = WidenToF32(Impl(layer->router));
  layer->impl = std::move(m);
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
  // Per-token fp8 and int8 (kernels/cuda/kv_codec.cuh), with --kv-cache-dtype-skip-layers and
  // checkpoint scales; int4, nvfp4, kivi2 and the side-pool policies are not on the GPU yet.
  support.formats = {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8};
  support.sink_tokens = support.recent_tokens = support.heavy_tokens = false;
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
  }
  return std::make_unique<CudaKVCache>(shape);
}

void CudaBackend::ReserveScratch(int64_t max_tokens, int64_t max_logits) {
  UseDevice(s_->device);
  State& s = *s_;
  s.gemm_x.Get<uint16_t>(max_tokens * s.max_k_padded);
  // Split-k partial sums: planes of at most kGemmPartialMaxRows rows (kernels/cuda/gemm.h).
  s.gemm_partial.Get<float>(std::min<int64_t>(max_tokens, cuda::kGemmPartialMaxRows) * s.max_partial_per_row);
  s.staging.Get<float>(max_logits * s.max_rows);
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
  if (moved) s.graphs->Drop();
  ++s.step_serial;

  // A decode step (one token and one logits row per sequence) may run as a graph.
  const bool decode = n > 0 && step.num_seqs() == n && step.num_logits() == n;
  // The attention's split grid grows with the context: a graph per depth (a few powers of two).
  s.stream = s.graphs->Begin(n, &cache, decode && !s.has_moe, cuda::FlashSplitDepth(s.max_keys));
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
        if (!s.graphs->replaying()) s.Gemm(w, x, y.f32(), y.row_stride, false);
        s.graphs->Finish(nullptr, 0, nullptr, 0, 0, 0);
        s.stream = nullptr;
      } else if (IsDevicePointer(y.data)) {
        if (s.graphs->replaying()) return;
        s.Gemm(w, x, y.f32(), y.row_stride, false);
      } else {
        // Host rows: the logits the engine hands in, the end of a step. Through device scratch;
        // a captured step ends its graph here and launches it, a replayed one just launches.
        if (static_cast<size_t>(x.rows * w.rows) * sizeof(float) > s.staging.bytes) s.graphs->Drop();
        float* d = s.staging.Get<float>(x.rows * w.rows);
        if (!s.graphs->replaying()) s.Gemm(w, x, d, w.rows, false);
        s.graphs->Finish(y.data, y.row_stride * sizeof(float), d, w.rows * sizeof(float), w.rows * sizeof(float),
                         x.rows);
        s.stream = nullptr;
      }
      return;
    case Epilogue::Kind::kAddTo:
      if (s.graphs->replaying()) return;
      s.Gemm(w, x, ep.out.f32(), ep.out.row_stride, true);
      return;
    case Epilogue::Kind::kSiluMulPairs:
      if (s.graphs->replaying()) return;
      s.Gemm(w, x, y.f32(), y.row_stride, false);
      cuda::SiluMulPairs16(y.f32(), y.row_stride, ep.out.f32(), ep.out.row_stride, x.rows, w.rows / 2, s.stream);
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
  cuda::RmsNorm(p, s_->stream);
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
}

void CudaBackend::WriteAttentionInputs(KVCache& cache, int64_t layer, const AttentionInputs& in) {
  const AttentionLayer& a = in.layer;
  if (a.head_dim > cuda::kMaxKVQuantDim || in.rope == nullptr || in.rope->dim > a.head_dim) {
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
  cuda::WriteAttentionInputs(p, s_->stream);
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
  if (cuda::FlashAttentionSupports(p)) {
    // A captured graph serves the later steps of its split depth (StepGraphs' shape).
    const int64_t keys = s_->max_keys;
    State& s = *s_;
    const cuda::FlashShape shape = cuda::ChooseFlashShape(q.rows, s.step->num_seqs());
    const cuda::FlashWorkItem* items = nullptr;
    if (shape == cuda::FlashShape::kWide) {
      const int64_t per_item = cuda::FlashTokensPerItem(a.num_heads / a.num_kv_heads);
      if (s.flash_items_serial != s.step_serial || s.flash_items_per_item != per_item) {
        const std::vector<cuda::FlashWorkItem> list = cuda::FlashWorkItems(s.step->query_start_loc, per_item);
        s.flash_items.Upload(list.data(), static_cast<int64_t>(list.size()));
        s.flash_items_serial = s.step_serial;
        s.flash_items_per_item = per_item;
        s.num_flash_items = static_cast<int64_t>(list.size());
      }
      items = s.flash_items.Get<cuda::FlashWorkItem>(s.num_flash_items);
    }
    float* scratch = s.attention_partial.Get<float>(cuda::FlashAttentionScratchFloats(q.rows, a.num_heads, a.head_dim));
    cuda::FlashAttention(p, shape, keys, items, s.num_flash_items, scratch, s.stream);
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
  cuda::MlaAttention(p, s_->stream);
}

void CudaBackend::Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) {
  OpTimer timer(s_.get(), "Moe");
  PAGODA_CHECK(layer.impl != nullptr) << "CudaBackend::Moe: the layer was not prepared (PrepareMoe)";
  PAGODA_CHECK(x.contiguous() && y.contiguous()) << "CudaBackend::Moe: x and y must be contiguous";
  const auto& moe = *static_cast<const CudaMoe*>(layer.impl.get());
  State& s = *s_;
  const int64_t n = x.rows, dim = x.cols, ne = spec.num_experts, k = spec.num_experts_per_tok;
  PAGODA_CHECK(static_cast<int64_t>(layer.gate.size()) == ne) << "MoE weights for " << layer.gate.size() << " experts";
  if (n == 0) return;
  // The router on the device, the routing decision on the host (kernels/cpu/moe.cc's).
  float* logits = s.moe_logits.Get<float>(n * ne);
  s.Gemm(moe.router_f32, x, logits, ne, false);
  s.host_logits.resize(n * ne);
  PAGODA_CUDA_CHECK(cudaMemcpy(s.host_logits.data(), logits, n * ne * sizeof(float), cudaMemcpyDeviceToHost));
  s.host_ids.resize(n * k);
  s.host_weights.resize(n * k);
  RouteTokens(spec, moe.score_bias, s.host_logits.data(), n, s.host_ids.data(), s.host_weights.data());

  // (token, slot) pairs grouped per expert (a counting sort, as on the CPU).
  s.starts.assign(ne + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++s.starts[s.host_ids[i] + 1];
  for (int64_t e = 0; e < ne; ++e) s.starts[e + 1] += s.starts[e];
  s.fill.assign(s.starts.begin(), s.starts.end() - 1);
  s.host_rows.resize(n * k);
  s.host_dest.resize(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t at = s.fill[s.host_ids[i]]++;
    s.host_rows[at] = static_cast<int32_t>(i / k);
    s.host_dest[at] = static_cast<int32_t>(i);
  }
  const int32_t* rows = s.moe_rows.Upload(s.host_rows.data(), n * k);
  const int32_t* dest = s.moe_dest.Upload(s.host_dest.data(), n * k);
  const float* weights = s.moe_weights.Upload(s.host_weights.data(), n * k);

  float* routed = s.moe_out.Get<float>(n * k * dim);  // [n * k, dim]: output of slot (t, j)
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t m = s.starts[e + 1] - s.starts[e];
    if (m == 0) continue;
    float* xe = s.moe_x.Get<float>(m * dim);
    float* ye = s.moe_y.Get<float>(m * dim);
    cuda::GatherRows(x.f32(), dim, rows + s.starts[e], m, dim, xe, dim, s.stream);
    s.SwiGlu(layer.gate[e], layer.up[e], layer.down[e], TensorView::F32(xe, m, dim, Device::kCuda), ye);
    cuda::ScatterRows(ye, dim, dest + s.starts[e], m, dim, routed, dim, s.stream);
  }
  if (layer.shared_gate.empty()) {
    cuda::FillRows(y.f32(), y.row_stride, n, dim, 0.0f, s.stream);
  } else {
    s.SwiGlu(layer.shared_gate, layer.shared_up, layer.shared_down, x, y.f32());
  }
  cuda::MoeCombine(routed, weights, n, k, dim, y.f32(), y.row_stride, s.stream);
}

void CudaBackend::AllReduce(const TensorView& x) {
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

// The logits as host rows: `logits` itself when it is host memory, else a copy.
static TensorView HostRows(const TensorView& logits, std::vector<float>* copy) {
  if (!IsDevicePointer(logits.data)) {
    TensorView v = logits;
    v.device = Device::kCpu;  // host memory, whatever the caller's view said
    return v;
  }
  copy->resize(static_cast<size_t>(logits.rows * logits.cols));
  if (!copy->empty()) {
    PAGODA_CUDA_CHECK(cudaMemcpy2D(copy->data(), logits.cols * sizeof(float), logits.data,
                                   logits.row_stride * sizeof(float), logits.cols * sizeof(float), logits.rows,
                                   cudaMemcpyDeviceToHost));
  }
  return TensorView::F32(copy->data(), logits.rows, logits.cols);
}

TensorView CudaBackend::LogitsBuffer(int64_t rows, int64_t vocab) {
  UseDevice(s_->device);
  State& s = *s_;
  // Graphs captured with the old buffer would write there: a larger one drops them.
  if (static_cast<size_t>(std::max<int64_t>(rows * vocab, 1)) * sizeof(float) > s.staging.bytes) s.graphs->Drop();
  return TensorView::F32(s.staging.Get<float>(rows * vocab), rows, vocab, Device::kCuda);
}

namespace {

// The CPU sampler's state and the parameters, which decide whether a row is greedy.
struct CudaSamplerState : SamplerState {
  std::unique_ptr<SamplerState> cpu;
  SamplingParams params;
};

// A row the device chooses: greedy with no penalty and no logprobs (the CPU sampler then takes
// the arg max of the raw logits and draws nothing from its generator).
bool DeviceGreedy(const SampleRow& row) {
  const SamplingParams& p = static_cast<const CudaSamplerState*>(row.state)->params;
  return p.greedy() && p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 &&
         row.logprobs == nullptr;
}

}  // namespace

std::unique_ptr<SamplerState> CudaBackend::CreateSampler(const SamplingParams& params) {
  auto state = std::make_unique<CudaSamplerState>();
  state->cpu = DefaultCpuBackend().CreateSampler(params);
  state->params = params;
  return state;
}

void CudaBackend::Sample(const TensorView& logits, std::span<SampleRow> rows) {
  PAGODA_CHECK(logits.rows == static_cast<int64_t>(rows.size()))
      << "Sample: " << logits.rows << " rows of logits for " << rows.size() << " requests";
  for (const SampleRow& r : rows) {
    PAGODA_CHECK(dynamic_cast<const CudaSamplerState*>(r.state) != nullptr)
        << "Sample: a sampler state the CUDA backend did not make";
  }
  // The CPU sampler's view of the rows: its own states.
  std::vector<SampleRow> cpu_rows(rows.begin(), rows.end());
  for (SampleRow& r : cpu_rows) r.state = static_cast<CudaSamplerState*>(r.state)->cpu.get();
  std::vector<float> copy;
  if (logits.device != Device::kCuda || !IsDevicePointer(logits.data)) {  // host rows: sampled in place
    DefaultCpuBackend().Sample(HostRows(logits, &copy), cpu_rows);
    for (size_t i = 0; i < rows.size(); ++i) rows[i].token = cpu_rows[i].token;
    return;
  }
  UseDevice(s_->device);
  std::vector<size_t> other;  // rows the CPU sampler takes, in order
  bool any_greedy = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (DeviceGreedy(rows[i])) {
      any_greedy = true;
    } else {
      other.push_back(i);
    }
  }
  if (any_greedy) {
    // Arg max of every row (one launch); only the greedy rows' ids are used.
    int32_t* ids = s_->sampled_ids.Get<int32_t>(logits.rows);
    cuda::ArgMaxRows(logits.f32(), logits.row_stride, logits.rows, logits.cols, ids, nullptr);
    std::vector<int32_t> host(static_cast<size_t>(logits.rows));
    PAGODA_CUDA_CHECK(cudaMemcpy(host.data(), ids, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < rows.size(); ++i) {
      if (DeviceGreedy(rows[i])) rows[i].token = host[i];
    }
  }
  if (other.empty()) return;
  // The other rows to the host in one copy (the span from the first to the last of them).
  const size_t lo = other.front();
  const TensorView span = HostRows(logits.RowRange(static_cast<int64_t>(lo), static_cast<int64_t>(other.back() - lo + 1)), &copy);
  for (size_t i : other) {
    DefaultCpuBackend().Sample(span.RowRange(static_cast<int64_t>(i - lo), 1), std::span<SampleRow>(&cpu_rows[i], 1));
    rows[i].token = cpu_rows[i].token;
  }
}

void CudaBackend::Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                           std::span<TokenLogprobs> out) {
  std::vector<float> copy;
  DefaultCpuBackend().Logprobs(HostRows(logits, &copy), tokens, k, out);
}

void CudaBackend::Upload(const float* src, const TensorView& dst) {
  if (dst.rows == 0 || dst.cols == 0) return;
  PAGODA_CUDA_CHECK(cudaMemcpy2D(dst.data, dst.row_stride * sizeof(float), src, dst.cols * sizeof(float),
                                 dst.cols * sizeof(float), dst.rows, cudaMemcpyHostToDevice));
}

void CudaBackend::Fill(const TensorView& dst, float value) {
  cuda::FillRows(dst.f32(), dst.row_stride, dst.rows, dst.cols, value, s_->stream);
}

void CudaBackend::Synchronize() {
  UseDevice(s_->device);
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace pagoda
