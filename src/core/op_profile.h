// Where a forward pass spends its time, by kind of kernel (matmul, attention, norms, ...),
// for `pagoda bench latency`. Off unless enabled; when off a timer costs one branch.
//
// Timers nest: a timer started inside another (activation quantization inside a MatMul)
// takes its time out of the outer one, so the kinds add up to the time covered. Only
// the thread that calls the kernels (the caller of ParallelFor) times anything, so
// times are wall-clock, not summed over workers.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace pagoda {

enum class OpKind : int {
  kMatMul,         // weight GEMM / GEMV (packing of activations included)
  kQuantize,       // activations to int8 blocks for the Q8_0 / Q4_0 kernels
  kAttention,      // paged / MLA attention over the KV cache
  kKVWrite,        // new K/V rows into the cache (with any KV quantization)
  kNorm,           // RMSNorm
  kRope,           // rotary embedding
  kActivation,     // SiLU(gate) * up and residual adds
  kCount
};
std::string_view OpKindName(OpKind kind);

struct OpProfile {
  std::array<double, static_cast<int>(OpKind::kCount)> seconds{};
  std::array<double, static_cast<int>(OpKind::kCount)> ops{};  // arithmetic (flops / int ops)
  std::array<int64_t, static_cast<int>(OpKind::kCount)> calls{};
  double total_seconds() const;
};

void EnableOpProfile(bool on);
bool OpProfileEnabled();
// The profile gathered since the last call, then starts a new one.
OpProfile TakeOpProfile();

class ScopedOpTimer {
 public:
  explicit ScopedOpTimer(OpKind kind, double ops = 0);
  ~ScopedOpTimer();
  ScopedOpTimer(const ScopedOpTimer&) = delete;
  ScopedOpTimer& operator=(const ScopedOpTimer&) = delete;

 private:
  OpKind kind_;
  double ops_;
  bool active_;
  double inner_ = 0;  // seconds of nested timers
  ScopedOpTimer* outer_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace pagoda
