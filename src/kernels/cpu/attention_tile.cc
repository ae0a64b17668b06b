#include "kernels/cpu/attention_tile.h"

#include <cstdlib>
#include <string>

#include "kernels/cpu/matmul_internal.h"

namespace pagoda::cpu {

AttentionTileKernels AttentionTileAt(matmul_internal::IsaLevel level) {
  switch (level) {
    case matmul_internal::IsaLevel::kAvx512: return AttentionTileAvx512();
    case matmul_internal::IsaLevel::kAvx2: return AttentionTileAvx2();
    case matmul_internal::IsaLevel::kGeneric: break;
  }
  return AttentionTileGeneric();
}

// The MatMul's level, or PAGODA_ATTENTION_ISA=avx2|generic below it (tuning: AVX2 and
// AVX-512 give the same bits, so either may be the faster on a CPU).
matmul_internal::IsaLevel DefaultAttentionIsa() {
  static const matmul_internal::IsaLevel level = [] {
    const matmul_internal::IsaLevel top = matmul_internal::DefaultIsaLevel();
    const char* env = std::getenv("PAGODA_ATTENTION_ISA");
    if (env == nullptr) return top;
    const std::string s(env);
    auto want = top;
    if (s == "avx2") want = matmul_internal::IsaLevel::kAvx2;
    if (s == "generic") want = matmul_internal::IsaLevel::kGeneric;
    return static_cast<int>(want) < static_cast<int>(top) ? want : top;
  }();
  return level;
}

std::vector<matmul_internal::IsaLevel> SupportedAttentionIsas() {
  std::vector<matmul_internal::IsaLevel> levels;
  for (auto level : {matmul_internal::IsaLevel::kGeneric, matmul_internal::IsaLevel::kAvx2,
                     matmul_internal::IsaLevel::kAvx512}) {
    if (matmul_internal::IsaLevelSupported(level)) levels.push_back(level);
  }
  return levels;
}

}  // namespace pagoda::cpu
