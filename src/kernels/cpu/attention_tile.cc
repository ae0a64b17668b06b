#include "kernels/cpu/attention_tile.h"

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

matmul_internal::IsaLevel DefaultAttentionIsa() { return matmul_internal::DefaultIsaLevel(); }

std::vector<matmul_internal::IsaLevel> SupportedAttentionIsas() {
  std::vector<matmul_internal::IsaLevel> levels;
  for (auto level : {matmul_internal::IsaLevel::kGeneric, matmul_internal::IsaLevel::kAvx2,
                     matmul_internal::IsaLevel::kAvx512}) {
    if (matmul_internal::IsaLevelSupported(level)) levels.push_back(level);
  }
  return levels;
}

}  // namespace pagoda::cpu
