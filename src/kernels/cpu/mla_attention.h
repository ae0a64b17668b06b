// Paged MLA attention on the CPU, absorbed form (prefill chunks and decodes alike).
//
// Each query token walks its keys in tiles of kMlaAttentionTile positions aligned to absolute
// positions, reading c_kv and k_pe through the block table once per tile for all heads (every
// head shares the latent: MQA over the cache), with an online softmax per head (running max m
// and sum l; the latent accumulator is rescaled when m grows). The score matrix never exists.
//
// The step of one tile (scores over c_kv and k_pe, exp, P.V over c_kv) is the paged kernel's
// cpu::AttentionTileKernels (attention_tile.h): run-time dispatched AVX-512 / AVX2 / portable at
// the MatMul's level; the rows of a tile are converted once for all heads of the item.
//
// Determinism: tiles depend only on positions, never on block_size, the batch or the thread
// split; one thread computes one (token, group of kMlaHeadsPerItem heads) item, and each head's
// arithmetic does not depend on which other heads share its item (for a given ISA level; AVX2
// and AVX-512 give the same bits).
// Quantized caches (latent_format / rope_format): each key's row is dequantized into the tile
// as it is loaded (a pure function of the row's bytes), so the above holds for every format.
// Thread safety: reentrant; runs on pagoda::NumThreads() threads.
#pragma once

#include "kernels/params/mla_attention_params.h"

namespace pagoda {
namespace matmul_internal {
enum class IsaLevel : int;
}

inline constexpr int64_t kMlaAttentionTile = 64;
inline constexpr int64_t kMlaHeadsPerItem = 16;

// REQUIRES: the params fields as documented in mla_attention_params.h; out does not alias q.
void MlaAttention(const MlaAttentionParams& p);
// The same at one ISA level (tests, benchmarks). REQUIRES: matmul_internal::IsaLevelSupported(level).
void MlaAttentionAt(matmul_internal::IsaLevel level, const MlaAttentionParams& p);
// Checks the quantized formats' geometry against p (PAGODA_CHECK); MlaAttention calls it.
void CheckMlaFormats(const MlaAttentionParams& p);

}  // namespace pagoda
