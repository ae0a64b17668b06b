// CudaBackend's state (the current step's device buffers, scratch, graphs, op timing) and the
// helpers its .cu files share: cuda_backend.cu (construction, preparation, memory, the step's
// row ops and GEMMs), cuda_backend_attention.cu, cuda_backend_moe.cu, cuda_backend_sampling.cu.
// Included by those files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/cuda_backend.h"
#include "backend/cuda_kv_cache.cuh"
#include "backend/cuda_memory.cuh"
#include "backend/cuda_step_graphs.cuh"
#include "backend/cuda_weights.cuh"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_f32.h"

namespace pagoda {

struct CudaMoe {
  std::vector<float> score_bias;  // host copy for the host-side routing
  // The router in f32 (bf16 values widened exactly), multiplied with f32 activations as the
  // reference implementations do: a bf16 rounding of the activations could flip a near tie
  // between experts and change the layer's output wholesale.
  CudaWeight router_f32;
};

inline void CheckF32(const TensorView& v, const char* what) {
  PAGODA_CHECK(v.dtype == DType::kF32) << "CudaBackend: " << what << " is not f32";
}

// Row kernels of at most this many rows (decode steps) launch as programmatic dependents of the
// kernel ahead: one wave, so their waiting blocks hold no slot a later block needs.
inline constexpr int64_t kPdlMaxRows = 64;


struct CudaBackend::State {
  int device = 0;
  int64_t free_at_start = 0;  // device memory free when the backend started (DeviceMemory)
  // Where ops launch: the legacy default stream (ordered with the synchronous copies), or the
  // graphs' stream while a decode step is being captured.
  cudaStream_t stream = nullptr;
  std::unique_ptr<StepGraphs> graphs;  // made once the device is selected
  // Caches (CudaKVCache::id) whose steps ran an op that waits on the host mid-step (MoE
  // routing): their model's decode steps run eagerly, not as graphs. A cache belongs to one
  // model, and the first step over a cache is never captured, so the op marks it in time.
  uint64_t step_cache_id = 0;
  std::unordered_set<uint64_t> host_waiting_caches;

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
  DeviceScratch gemm_x, gemm_partial;  // bf16 copies of GEMM inputs; split-k partial sums
  // A bf16 copy of the next GEMM's input written by the kernel that made it: RMSNorm's and
  // FlashAttention's output into gemm_x, the fused SiLU's into gemm_x2 (the gate|up product
  // reads gemm_x meanwhile).
  // Valid for the op right after its producer (op_serial counts every op that writes device
  // memory); the GEMM then launches no conversion. PAGODA_CUDA_X_BF16=0 turns it off.
  struct XBf16 {
    const float* x = nullptr;  // the f32 tensor it copies
    uint16_t* xb = nullptr;    // [rows, cols] contiguous
    int64_t rows = 0, cols = 0;
    uint64_t op = 0;  // the producer's op_serial
  };
  XBf16 x_bf16;
  uint64_t op_serial = 0;
  bool x_bf16_on = true;
  DeviceScratch gemm_x2;
  // The copy of x that the GEMM of the current op may take (k_padded: its weight's), or null;
  // either way the record is used up.
  const uint16_t* TakeXBf16(const TensorView& x, int64_t k_padded) {
    const XBf16 r = x_bf16;
    x_bf16 = XBf16{};
    if (r.xb == nullptr || r.op + 1 != op_serial || r.x != x.data || r.rows != x.rows || r.cols != x.cols ||
        k_padded != x.cols) {
      return nullptr;
    }
    return r.xb;
  }
  DeviceScratch gemm_counters;         // kGemmMaxCounters tile counters, zeroed once
  // Decode kernels (up to 64 rows: the GEMMs, and the RMSNorm, attention inputs and SiLU after
  // them) as programmatic dependent launches (kernels/cuda/pdl.cuh).
  bool gemm_pdl = true;
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

  // silu_out: y holds gate|up pairs of 16 columns and silu(gate) * up goes to silu_out
  // (GemmBf16Params::silu_out).
  // x_bf16_ready: x rounded to bf16 by its producer (TakeXBf16).
  void Gemm(const CudaWeight& w, const TensorView& x, float* y, int64_t y_stride, bool accumulate,
            float* silu_out = nullptr, int64_t silu_stride = 0, const uint16_t* x_bf16_ready = nullptr) {
    PAGODA_CHECK(x.cols == w.cols) << "CudaBackend::MatMul: x has " << x.cols << " columns, W " << w.cols;
    if (w.dtype == DType::kF32) {
      cuda::GemmF32(x.f32(), x.row_stride, x.rows, w.f32(), w.rows, w.cols, y, y_stride, accumulate, stream);
      if (silu_out != nullptr) cuda::SiluMulPairs16(y, y_stride, silu_out, silu_stride, x.rows, w.rows / 2, stream);
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
    p.xb = x_bf16_ready != nullptr ? const_cast<uint16_t*>(x_bf16_ready) : gemm_x.Get<uint16_t>(x.rows * w.k_padded);
    p.xb_ready = x_bf16_ready != nullptr;
    const int64_t partial = cuda::GemmBf16PartialFloats(x.rows, w.rows, w.splits);
    p.partial = partial > 0 ? gemm_partial.Get<float>(partial) : nullptr;
    p.counters = gemm_counters.Get<int>(cuda::kGemmMaxCounters);
    p.pdl = gemm_pdl;
    p.silu_out = silu_out;
    p.silu_stride = silu_stride;
    if (silu_out != nullptr && x_bf16_on && cuda::GemmConvertsX(x.rows) && cuda::GemmFusesSilu(p)) {
      // The down product's input, rounded in this product's epilogue.
      p.silu_bf16 = gemm_x2.Get<uint16_t>(x.rows * (w.rows / 2));
      x_bf16 = XBf16{silu_out, p.silu_bf16, x.rows, w.rows / 2, op_serial};
    }
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

  // Sampling on the device (cuda_backend_sampling.cu): the sort scratch, the rows' uploads and
  // results, and a host stamp per token id for deduplicating penalized histories.
  DeviceScratch sample_scratch, sample_io;
  std::vector<int32_t> sample_seen;
};

// Tensor parallelism drives one CudaBackend per GPU from several threads: every entry point
// that allocates or launches first makes this backend's GPU the calling thread's.
inline void UseDevice(int device) { PAGODA_CUDA_CHECK(cudaSetDevice(device)); }

// Times one op when op timing is on (synchronizing around it), else does nothing.
class OpTimer {
 public:
  OpTimer(CudaBackend::State* s, const char* name) : s_(s->time_ops ? s : nullptr), name_(name) {
    ++s->op_serial;  // (State::XBf16)
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

}  // namespace pagoda
