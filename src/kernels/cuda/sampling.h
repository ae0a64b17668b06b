// Sampling on the device: penalties, temperature, top-k / top-p / min-p, the draw, and the raw
// logits' logprobs, so that only token ids and the asked-for logprob records come back to the
// host (not the [rows, vocab] logits). The CPU sampler (kernels/cpu/sampler.h) is the reference
// and its algorithm is followed step by step:
//
//  - penalties on a copy of the row: repetition once per distinct token of prompt + output
//    (x > 0 ? float(x / pen) : float(x * pen), in double), then x -= float(freq * count +
//    presence) for the output's tokens;
//  - greedy rows: the CPU's ArgMax of the penalized row (lowest index among ties, index 0 when
//    the row starts with NaN);
//  - drawn rows: the row sorted by (logit descending, id ascending) (one stable device-wide
//    radix sort of all the drawn rows, keyed by (row, logit); -0.0 equal to +0.0); top-k; p_i = exp(double(x_i) * inv_t - m) in double with no fused
//    multiply-add; top-p (the first i with cumulative p / sum >= top_p keeps i + 1); min-p (keep
//    while p >= min_p * p[0]); the first i with uniform * total < cumulative p, else the last
//    kept one. The uniform comes from the host (Sampler::NextUniform), one per drawn row;
//  - logprobs of the raw (unpenalized) row: log-sum-exp in double, the chosen token's logprob
//    and rank, the top k (<= 20) by (logit descending, id ascending).
//
// The sums are block-wide in double, in an order fixed by the vocabulary size alone (so a row
// gets the same token whatever else is in the batch) but not the CPU's left-to-right order,
// and the device's exp/log may differ from the host's by an ulp: a drawn token can differ from
// the CPU's only when the draw (or a top-p cut) lands within such a rounding of a boundary
// between two tokens (relative 1e-15 of the total), and logprobs agree to ~1e-13. NaN logits
// rank as -inf in the drawn rows' order, as in the CPU's (OrderByLogit).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pagoda::cuda {

constexpr int kMaxTopLogprobs = 20;

// One row to sample.
struct SampleRowParams {
  int64_t logits_row = 0;  // the row of SampleRowsParams::logits it samples
  int32_t greedy = 0;      // 1: the arg max of the penalized row, no draw
  int32_t penalized = 0;   // 1: its PenaltyEntry list applies (a penalty is on)
  int32_t logprobs = -1;   // < 0: none; k in [0, 20]: the chosen token's logprob and the top k
  int32_t pad = 0;
  int64_t top_k = 0;  // <= 0: off
  double inv_temperature = 1.0;  // 1 / temperature (the host's division, as the CPU's)
  double top_p = 1.0, min_p = 0.0;
  double repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0;
  double uniform = 0.0;  // the row's draw in [0, 1) (drawn rows)
};

// A distinct token of a penalized row's prompt + output, with its count in the output.
struct PenaltyEntry {
  int32_t row = 0;           // index into SampleRowsParams::rows
  int32_t token = 0;         // in [0, vocab)
  int32_t output_count = 0;  // 0: prompt only (repetition penalty only)
};

// What comes back for a row.
struct SampleResult {
  int32_t token;
  int32_t num_top;  // the top logprobs filled (logprob rows)
  int64_t rank;     // 1 + the number of raw logits larger than the token's
  double logprob;   // of the raw logits (logprob rows)
  int32_t top_ids[kMaxTopLogprobs];
  double top_logprobs[kMaxTopLogprobs];
};

struct SampleRowsParams {
  const float* logits = nullptr;  // device [*, row_stride]
  int64_t row_stride = 0;
  int64_t vocab = 0;
  const SampleRowParams* rows = nullptr;  // device [num_rows]: the drawn rows first
  int64_t num_rows = 0;
  int64_t num_drawn = 0;  // rows[0, num_drawn) are drawn (greedy == 0), the rest greedy
  const PenaltyEntry* penalties = nullptr;  // device [num_penalties], any order
  int64_t num_penalties = 0;
  SampleResult* results = nullptr;  // device [num_rows]
  void* scratch = nullptr;          // device, SampleScratchBytes(num_rows, vocab) bytes
  size_t scratch_bytes = 0;
};

// Rows sorted at once (the scratch holds this many rows' sort buffers, 24 bytes a logit, at most
// 2^23 logits; more rows go in turns).
int64_t SampleChunkRows(int64_t vocab);
// Scratch bytes SampleRows needs for `rows` rows of `vocab` logits (sort buffers and CUB's
// temporary storage for min(rows, SampleChunkRows(vocab)) rows).
size_t SampleScratchBytes(int64_t rows, int64_t vocab);
// results[r] for every row: a copy with penalties, the drawn rows' sort, then one block per row.
void SampleRows(const SampleRowsParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
