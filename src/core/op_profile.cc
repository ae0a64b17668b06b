#include "core/op_profile.h"

#include <atomic>
#include <mutex>

namespace pagoda {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
OpProfile g_profile;
thread_local ScopedOpTimer* t_current = nullptr;

}  // namespace

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kMatMul: return "matmul";
    case OpKind::kQuantize: return "quantize";
    case OpKind::kAttention: return "attention";
    case OpKind::kKVWrite: return "kv write";
    case OpKind::kNorm: return "norm";
    case OpKind::kRope: return "rope";
    case OpKind::kActivation: return "act/add";
    case OpKind::kCount: break;
  }
  return "?";
}

double OpProfile::total_seconds() const {
  double s = 0;
  for (double v : seconds) s += v;
  return s;
}

void EnableOpProfile(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool OpProfileEnabled() { return g_enabled.load(std::memory_order_relaxed); }

OpProfile TakeOpProfile() {
  std::lock_guard<std::mutex> lock(g_mu);
  OpProfile p = g_profile;
  g_profile = OpProfile{};
  return p;
}

ScopedOpTimer::ScopedOpTimer(OpKind kind, double ops)
    : kind_(kind), ops_(ops), active_(OpProfileEnabled()) {
  if (!active_) return;
  outer_ = t_current;
  t_current = this;
  start_ = std::chrono::steady_clock::now();
}

ScopedOpTimer::~ScopedOpTimer() {
  if (!active_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  t_current = outer_;
  if (outer_ != nullptr) outer_->inner_ += s;
  const int i = static_cast<int>(kind_);
  std::lock_guard<std::mutex> lock(g_mu);
  g_profile.seconds[i] += s - inner_;
  g_profile.ops[i] += ops_;
  ++g_profile.calls[i];
}

}  // namespace pagoda
