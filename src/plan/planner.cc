#include "plan/planner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void ValidateInputs(const PlanInputs& in) {
  auto positive = [](int64_t v, const char* flag) {
    PAGODA_ENSURE(v > 0, ErrorCode::kInvalidArgument, flag << " must be positive (got " << v << ")");
  };
  positive(in.num_gpus, "--num-gpus");
  positive(in.concurrency, "--concurrency");
  positive(in.context, "--context");
  positive(in.block_size, "--block-size");
  // The engine's allocator takes powers of two up to 256 (kv/kv_cache_config.h).
  PAGODA_ENSURE(in.block_size <= 256 && (in.block_size & (in.block_size - 1)) == 0,
                ErrorCode::kInvalidArgument,
                "--block-size: " << in.block_size << " is not a power of two from 1 to 256");
  positive(in.max_num_batched_tokens, "--max-num-batched-tokens");
  PAGODA_ENSURE(in.gpu.memory_bytes > 0 && in.gpu.memory_bandwidth > 0 && in.gpu.bf16_flops > 0,
                ErrorCode::kInvalidArgument,
                "GPU '" << in.gpu.name << "': memory, bandwidth and FLOP/s must be positive");
  PAGODA_ENSURE(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1,
                ErrorCode::kInvalidArgument,
                "--gpu-memory-utilization must be in (0, 1] (got " << in.gpu_memory_utilization << ")");
  PAGODA_ENSURE(in.prefix_share >= 0 && in.prefix_share <= 1, ErrorCode::kInvalidArgument,
                "--prefix-share must be in [0, 1] (got " << in.prefix_share << ")");
  PAGODA_ENSURE(in.input_len <= in.context, ErrorCode::kInvalidArgument,
                "--input-len " << in.input_len << " exceeds the context " << in.context);
  PAGODA_ENSURE(in.model.num_heads % in.num_gpus == 0, ErrorCode::kInvalidArgument,
                "--num-gpus " << in.num_gpus << " does not divide the " << in.model.num_heads
                              << " attention heads of " << in.model.name);
}

// Parameters of the routed experts one token uses (k of E per MoE layer).
double RoutedExpertParams(const ModelSpec& m, double experts_per_layer) {
  if (m.moe.num_experts == 0) return 0;
  const int64_t moe_layers = std::max<int64_t>(0, m.num_layers - m.moe.first_k_dense_replace);
  return static_cast<double>(moe_layers) * experts_per_layer * 3.0 *
         static_cast<double>(m.dim * m.moe.expert_ffn_dim);
}

// Expected distinct experts a batch of `batch` tokens touches in one MoE layer.
double ExpertsTouched(const MoeSpec& moe, int64_t batch) {
  const double e = static_cast<double>(moe.num_experts);
  const double k = static_cast<double>(moe.num_experts_per_tok);
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(batch)));
}

DecodeRoofline Roofline(const PlanInputs& in, const KVShape& shape, int64_t kv_per_token_gpu) {
  const ModelSpec& m = in.model;
  const double g = static_cast<double>(in.num_gpus);
  const double batch = static_cast<double>(in.concurrency);
  const double ctx = static_cast<double>(in.context);
  const double active = static_cast<double>(m.NumActiveParameters());
  // Weights read once per step for the whole batch; MoE reads every expert touched.
  const double k = static_cast<double>(m.moe.num_experts_per_tok);
  const double read_params = active - RoutedExpertParams(m, k) +
                             RoutedExpertParams(m, m.moe.num_experts ? ExpertsTouched(m.moe, in.concurrency) : 0);
  DecodeRoofline r;
  r.weight_bytes_read = read_params * in.weights.bytes_per_param / g;
  r.kv_bytes_read = batch * ctx * static_cast<double>(kv_per_token_gpu);
  // Attention per token per layer: scores (q.k over d_k) and the weighted sum (over d_v);
  // MLA in the absorbed form attends over the latent (+ k_pe for the scores).
  const double d_qk = static_cast<double>(shape.head_dim_k + shape.rope_dim);
  const double d_v = static_cast<double>(shape.mla ? shape.head_dim_k : shape.head_dim_v);
  const double attn = 2.0 * static_cast<double>(m.num_heads) * (d_qk + d_v) * ctx *
                      static_cast<double>(shape.num_layers);
  r.flops = (2.0 * active + attn) * batch / g;
  r.memory_bound_s = (r.weight_bytes_read + r.kv_bytes_read) / in.gpu.memory_bandwidth;
  r.compute_bound_s = r.flops / in.gpu.FlopsFor(in.weights.fp8_compute);
  return r;
}

}  // namespace

KVShape ShardKVShape(const KVShape& shape, int64_t num_gpus) {
  KVShape s = shape;
  if (shape.mla || num_gpus == 1) return s;  // the latent is replicated on every GPU
  const int64_t h = shape.num_kv_heads;
  PAGODA_ENSURE(h % num_gpus == 0 || num_gpus % h == 0, ErrorCode::kInvalidArgument,
                "--num-gpus " << num_gpus << " and the " << h
                              << " KV heads do not divide one another");
  s.num_kv_heads = std::max<int64_t>(1, h / num_gpus);
  return s;
}

int64_t EstimateActivationReserve(const ModelSpec& m, int64_t num_gpus,
                                  int64_t max_num_batched_tokens, int64_t concurrency) {
  const int64_t q_width = m.num_heads * m.head_dim;
  const int64_t kv_width = m.is_mla() ? m.num_heads * (m.head_dim + m.mla.v_head_dim)
                                      : 2 * m.num_kv_heads * m.head_dim;
  const int64_t mlp_width =
      m.moe.num_experts > 0
          ? std::max(m.ffn_dim, m.moe.expert_ffn_dim *
                                    (m.moe.num_experts_per_tok + m.moe.num_shared_experts))
          : m.ffn_dim;
  // residual + normed input + attention output (full width) and the sharded projections.
  const int64_t per_token = 3 * m.dim + (q_width + kv_width + 2 * mlp_width) / num_gpus;
  return kGiB + max_num_batched_tokens * per_token * 2 +
         std::max<int64_t>(concurrency, 1) * m.vocab_size * 4;
}

PlanResult Plan(const PlanInputs& in) {
  ValidateInputs(in);
  const ModelSpec& m = in.model;
  const KVShape shape = in.kv_shape.value_or(m.kv_shape());
  const KVShape gpu_shape = ShardKVShape(shape, in.num_gpus);
  const int64_t bs = in.block_size;

  PlanResult r;
  r.num_parameters = m.NumParameters();
  r.num_active_parameters = m.NumActiveParameters();
  r.weight_bytes = static_cast<int64_t>(
      std::ceil(static_cast<double>(r.num_parameters) * in.weights.bytes_per_param));
  r.weight_bytes_per_gpu = CeilDiv(r.weight_bytes, in.num_gpus);
  r.kv_bytes_per_token = KVBytesPerToken(shape, in.kv_dtype, in.kv_options);
  r.kv_bytes_per_token_per_gpu = KVBytesPerToken(gpu_shape, in.kv_dtype, in.kv_options);
  r.kv_bytes_per_sequence = r.kv_bytes_per_token * in.context;
  r.kv_bytes_total = r.kv_bytes_per_sequence * in.concurrency;

  r.usable_bytes_per_gpu = static_cast<int64_t>(
      static_cast<double>(in.gpu.memory_bytes) * in.gpu_memory_utilization);
  r.activation_reserve_bytes =
      in.activation_reserve_bytes >= 0
          ? in.activation_reserve_bytes
          : EstimateActivationReserve(m, in.num_gpus, in.max_num_batched_tokens, in.concurrency);
  r.kv_memory_per_gpu = in.kv_cache_memory_bytes >= 0
                            ? in.kv_cache_memory_bytes
                            : r.usable_bytes_per_gpu - r.weight_bytes_per_gpu -
                                  r.activation_reserve_bytes;
  r.weights_fit = r.weight_bytes_per_gpu + r.activation_reserve_bytes <= r.usable_bytes_per_gpu;
  // The engine's own block count for this much memory.
  r.num_blocks = NumKVBlocks(r.kv_memory_per_gpu, bs, r.kv_bytes_per_token_per_gpu);
  r.kv_capacity_tokens = r.num_blocks * bs;

  const int64_t input_len = in.input_len >= 0 ? in.input_len : in.context;
  r.blocks_per_sequence = CeilDiv(in.context, bs);
  // Only full blocks are cached and shared (prefix caching).
  r.shared_prefix_blocks = static_cast<int64_t>(
      std::floor(in.prefix_share * static_cast<double>(input_len))) / bs;
  const int64_t own_blocks = r.blocks_per_sequence - r.shared_prefix_blocks;
  r.blocks_needed = r.shared_prefix_blocks + in.concurrency * own_blocks;
  r.fits = r.weights_fit && r.blocks_needed <= r.num_blocks;
  r.max_concurrency = r.num_blocks >= r.blocks_per_sequence
                          ? (own_blocks > 0 ? (r.num_blocks - r.shared_prefix_blocks) / own_blocks
                                            : r.num_blocks)
                          : 0;
  r.max_model_len_uncapped = r.num_blocks / in.concurrency * bs;
  r.max_model_len = std::min(r.max_model_len_uncapped, m.max_position);
  r.prefix_memory_saved_bytes = static_cast<double>(in.concurrency - 1) *
                                static_cast<double>(r.shared_prefix_blocks * bs) *
                                static_cast<double>(r.kv_bytes_per_token);
  r.prefix_prefill_saved_fraction =
      input_len > 0 ? static_cast<double>(r.shared_prefix_blocks * bs) / input_len : 0;

  r.decode = Roofline(in, shape, r.kv_bytes_per_token_per_gpu);
  if (!r.fits) {
    r.bottleneck = "capacity";
  } else {
    r.bottleneck = r.decode.memory_bound_s >= r.decode.compute_bound_s ? "memory_bandwidth" : "compute";
    r.decode_tokens_per_s = static_cast<double>(in.concurrency) / r.decode.step_s();
  }
  return r;
}

}  // namespace pagoda
