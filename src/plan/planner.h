// The KV memory planner: will model M serve C requests of L tokens on G GPUs, how many
// KV blocks does the engine get, and is a decode step bound by memory bandwidth or by
// compute? First principles plus the engine's own sizing code:
//
//   bytes per token   = KVBytesPerToken(shape per GPU, dtype, options)   (kv/kv_layout.h)
//   num_blocks        = NumKVBlocks(kv memory per GPU, block_size, bytes per token per GPU)
//
// the same two calls the engine's allocator makes, so the planner's block count is the
// engine's for the same memory.
//
// Memory per GPU (vLLM's accounting; gpu_memory_utilization covers everything):
//
//   +------------------------ memory_bytes x gpu_memory_utilization -----------------+
//   | weights / num_gpus | activation + overhead reserve | KV cache (num_blocks)      |
//   +--------------------------------------------------------------------------------+
//
// Tensor parallelism (num_gpus = TP degree) shards every weight matrix and the KV heads:
// each GPU caches num_kv_heads / num_gpus heads (at least one: with more GPUs than KV
// heads the heads are replicated, as vLLM does). The MLA latent (kv_lora_rank + k_pe) is
// ONE vector per token shared by all heads, so it cannot be sharded by heads: every GPU
// holds the whole latent, and TP does not grow MLA's KV capacity per token.
//
// Activation/overhead reserve (an assumption; the engine measures its own): 1 GiB for
// the CUDA context, library workspaces and CUDA graphs, plus the peak activations of one
// forward pass over max_num_batched_tokens tokens in bf16 (residual, normed input, q/k/v,
// attention output and the gate/up MLP outputs of the local shard) plus fp32 logits for
// max(concurrency, 1) sequences. `activation_reserve_bytes` >= 0 replaces the estimate.
//
// Decode step roofline (one step = one token for each of `concurrency` sequences, all at
// position `context`, the worst case at the end of generation), per GPU:
//   memory_bound  = (active weight bytes / num_gpus + concurrency x context x KV bytes
//                    per token per GPU) / memory_bandwidth
//   compute_bound = (2 x active params x concurrency / num_gpus + attention FLOPs) / FLOP/s
// MoE: a batch of B tokens touches E x (1 - (1 - k/E)^B) of E experts per layer on
// average (k routed per token), so weight reads grow with the batch until all are read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_layout.h"
#include "model/model_spec.h"
#include "plan/gpu_presets.h"
#include "plan/weight_format.h"

namespace pagoda {

struct PlanInputs {
  ModelSpec model;
  // The cache shape to plan for; unset = model.kv_shape(). (--compare swaps in MHA,
  // GQA and MLA variants of the same model.)
  std::optional<KVShape> kv_shape;
  GpuSpec gpu;
  int64_t num_gpus = 1;
  int64_t concurrency = 1;
  int64_t context = 0;     // tokens per sequence (prompt + output); REQUIRES > 0
  int64_t input_len = -1;  // prompt tokens (for prefix sharing); -1: = context
  KVCacheDType kv_dtype = KVCacheDType::kBF16;
  KVQuantOptions kv_options;
  WeightFormat weights;
  int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  // --kv-cache-memory: KV bytes per GPU given outright (vLLM); -1: derive from the rest.
  int64_t kv_cache_memory_bytes = -1;
  double prefix_share = 0;  // fraction of prompt tokens shared by all requests, [0, 1]
  int64_t max_num_batched_tokens = 8192;
  int64_t activation_reserve_bytes = -1;  // -1: the estimate above
};

struct DecodeRoofline {
  double memory_bound_s = 0;
  double compute_bound_s = 0;
  double weight_bytes_read = 0;  // per GPU per step
  double kv_bytes_read = 0;      // per GPU per step
  double flops = 0;              // per GPU per step
  double step_s() const { return memory_bound_s > compute_bound_s ? memory_bound_s : compute_bound_s; }
};

struct PlanResult {
  // Model and cache.
  int64_t num_parameters = 0;
  int64_t num_active_parameters = 0;
  int64_t weight_bytes = 0;                // whole model
  int64_t weight_bytes_per_gpu = 0;
  int64_t kv_bytes_per_token = 0;          // one copy of the cache (all layers, all heads)
  int64_t kv_bytes_per_token_per_gpu = 0;  // what each GPU stores (MLA: the whole latent)
  int64_t kv_bytes_per_sequence = 0;       // kv_bytes_per_token x context
  int64_t kv_bytes_total = 0;              // x concurrency, without prefix sharing
  // Memory per GPU.
  int64_t usable_bytes_per_gpu = 0;        // memory x gpu_memory_utilization
  int64_t activation_reserve_bytes = 0;
  int64_t kv_memory_per_gpu = 0;           // <= 0: the weights do not fit
  int64_t num_blocks = 0;                  // per GPU (every GPU has the same count)
  int64_t kv_capacity_tokens = 0;          // num_blocks x block_size
  // Demand.
  int64_t blocks_per_sequence = 0;         // ceil(context / block_size)
  int64_t shared_prefix_blocks = 0;        // full blocks of the shared prefix, stored once
  int64_t blocks_needed = 0;
  bool weights_fit = false;
  bool fits = false;
  int64_t max_concurrency = 0;             // at `context`
  int64_t max_model_len = 0;               // at `concurrency`, capped at the model's context
  int64_t max_model_len_uncapped = 0;
  double prefix_memory_saved_bytes = 0;    // KV bytes prefix caching saves (all GPUs' view)
  double prefix_prefill_saved_fraction = 0;
  DecodeRoofline decode;
  std::string bottleneck;                  // capacity | memory_bandwidth | compute
  double decode_tokens_per_s = 0;          // whole deployment, 0 when it does not fit
};

// The KV shape one GPU stores under tensor parallelism (see the header comment).
// Throws InvalidArgument when num_kv_heads and num_gpus do not divide one another.
KVShape ShardKVShape(const KVShape& shape, int64_t num_gpus);

// Estimated activation/overhead reserve per GPU (see the header comment).
int64_t EstimateActivationReserve(const ModelSpec& model, int64_t num_gpus,
                                  int64_t max_num_batched_tokens, int64_t concurrency);

// Validates the inputs (InvalidArgument naming the flag) and plans.
PlanResult Plan(const PlanInputs& in);

}  // namespace pagoda
