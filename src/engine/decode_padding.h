// Decode batches padded to a few sizes (vLLM's CUDA graph capture sizes): a backend that runs
// decode steps as captured graphs needs one graph per batch size, so the engine pads a step of
// n sequences (one token each) to the smallest configured size >= n with rows that write and
// read a spare KV block and whose logits are dropped. The real rows' results do not change:
// every kernel gives a row the same bits whatever else is in the batch (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {

// The sizes for `--cuda-graph-sizes`: "none" (or empty): no padding; "auto": 1, 2, 4, 8, then
// every multiple of 8, up to and including max_num_seqs (vLLM's default capture sizes);
// otherwise a comma-separated list of positive sizes (sorted, duplicates dropped, sizes above
// max_num_seqs dropped, max_num_seqs added when the list would not reach it). Throws
// InvalidArgument naming the flag for anything else.
std::vector<int64_t> ParseDecodeBatchSizes(const std::string& spec, int64_t max_num_seqs);

// The batch a decode step of n sequences runs at: the smallest of `sizes` (ascending) that is
// >= n, or n itself when none is (or sizes is empty).
int64_t PaddedDecodeBatch(int64_t n, const std::vector<int64_t>& sizes);

}  // namespace pagoda
