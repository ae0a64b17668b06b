// Paged MLA attention on the CPU, absorbed form (prefill chunks and decodes alike).
//
// Each query token walks its keys in tiles of kMlaAttentionTile positions aligned to absolute
// positions, reading c_kv and k_pe through the block table once per tile for all heads (every
// head shares the latent: MQA over the cache), with an online softmax per head (running max m
// and sum l; the latent accumulator is rescaled when m grows). The score matrix never exists.
//
// Determinism: tiles depend only on positions, never on block_size, the batch or the thread
// split; one thread computes one (token, group of kMlaHeadsPerItem heads) item, and each head's
// arithmetic does not depend on which other heads share its item.
// Quantized caches (latent_format / rope_format): each key's row is dequantized into the tile
// as it is loaded (a pure function of the row's bytes), so the above holds for every format.
// Thread safety: reentrant; runs on pagoda::NumThreads() threads.
#pragma once

#include "kernels/params/mla_attention_params.h"

namespace pagoda {

inline constexpr int64_t kMlaAttentionTile = 64;
inline constexpr int64_t kMlaHeadsPerItem = 16;

// REQUIRES: the params fields as documented in mla_attention_params.h; out does not alias q.
void MlaAttention(const MlaAttentionParams& p);
// Checks the quantized formats' geometry against p (PAGODA_CHECK); MlaAttention calls it.
void CheckMlaFormats(const MlaAttentionParams& p);

}  // namespace pagoda
