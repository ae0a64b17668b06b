// FlashAttention-style paged attention on the CPU (prefill chunks and decodes alike).
//
// Each query walks its keys in tiles of kAttentionTile positions aligned to absolute
// positions, reading K/V through the block table, with an online softmax (running max
// m and sum l, the accumulator rescaled when m grows). The score matrix never exists.
// A group of query heads that share a KV head is served from one read of each K/V row.
//
// The inner step (K/V rows converted once per tile for the whole group, scores, exp, P.V) is
// cpu::AttentionTileKernels (attention_tile.h), run-time dispatched: AVX-512, AVX2 or portable,
// at the level the MatMul uses (PAGODA_MATMUL_ISA=generic|avx2|avx512 or the best the CPU has).
//
// A prefill's consecutive tokens of one sequence (up to 32 query rows) share every tile step,
// the causal diagonal included (each row limited to its own keys), so a K/V tile is read and
// converted once for all of them.
//
// Determinism: the tiles depend only on positions, not on block_size, the batch or the
// thread split; one thread computes a whole (run of tokens, KV head) pair (one split of it for
// long contexts), and a step's arithmetic per (row, key) does not depend on the other rows. For a given ISA level every output is one fixed sequence of operations over its
// own query and keys; AVX2 and AVX-512 give the same bits, the portable level may differ from
// them in the last bits.
#pragma once

#include <vector>

#include "kernels/params/attention_params.h"

namespace pagoda {
namespace matmul_internal {
enum class IsaLevel : int;
}

inline constexpr int64_t kAttentionTile = 64;
// Long contexts are split into windows of this many positions (a multiple of the tile),
// computed in parallel and merged by log-sum-exp (flash-decoding).
inline constexpr int64_t kAttentionSplit = 512;

void PagedAttention(const PagedAttentionParams& p);

// Plan, then run (FlashInfer): the work partition of a PagedAttention call (runs of tokens
// that share tile steps, KV heads, windows of long contexts, their order and thread count)
// depends only on the tokens' positions and block tables and the head layout, so one plan
// made per step serves every layer with the same layout. Vectors are reused between plans.
struct PagedAttentionPlan {
  struct WorkItem {
    int64_t t, nt, kvh, window;
    int64_t cost;  // keys x tokens, plus a fixed overhead
  };
  std::vector<int64_t> first_window, num_windows;  // [num_tokens]
  std::vector<int64_t> partial_base;               // [num_tokens * num_kv_heads]
  std::vector<WorkItem> items;
  std::vector<int32_t> order;  // items, costliest first
  int64_t num_partials = 0;
  int threads = 1;
  bool any_split = false;
  // What the plan was made for (Fits checks a call against it).
  bool planned = false;
  int64_t num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, sliding_window = 0;
  bool grouped = false;

  bool Fits(const PagedAttentionParams& p) const;
  // Tokens of one sequence may share tile steps: no sliding window, no wide copies.
  static bool CanGroup(const PagedAttentionParams& p);
};
// Fills `plan` for p's tokens and layout (p's caches and q/out are not read).
void PlanPagedAttention(const PagedAttentionParams& p, PagedAttentionPlan* plan);
// PagedAttention with a plan made by PlanPagedAttention for the same tokens and layout.
void PagedAttention(const PagedAttentionParams& p, const PagedAttentionPlan& plan);
// The same at one ISA level (tests, benchmarks). REQUIRES: matmul_internal::IsaLevelSupported(level).
void PagedAttentionAt(matmul_internal::IsaLevel level, const PagedAttentionParams& p);
void PagedAttentionAt(matmul_internal::IsaLevel level, const PagedAttentionParams& p, const PagedAttentionPlan& plan);

}  // namespace pagoda
