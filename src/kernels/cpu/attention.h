// FlashAttention-style paged attention on the CPU (prefill chunks and decodes alike).
//
// Each query walks its keys in tiles of kAttentionTile positions aligned to absolute
// positions, reading K/V through the block table, with an online softmax (running max
// m and sum l, the accumulator rescaled when m grows). The score matrix never exists.
// A group of query heads that share a KV head is served from one read of each K/V row.
//
// Determinism: the tiles depend only on positions, not on block_size, the batch or the
// thread split; one thread computes a whole (token, KV head) pair.
#pragma once

#include "kernels/params/attention_params.h"

namespace pagoda {

inline constexpr int64_t kAttentionTile = 64;
// Long contexts are split into windows of this many positions (a multiple of the tile),
// computed in parallel and merged by log-sum-exp (flash-decoding).
inline constexpr int64_t kAttentionSplit = 512;

void PagedAttention(const PagedAttentionParams& p);

}  // namespace pagoda
