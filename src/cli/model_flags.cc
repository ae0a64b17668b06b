#include "cli/model_flags.h"

#include "cli/default_model.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "engine/decode_padding.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_layout.h"
#include "model/tensor_parallel_model.h"

#ifdef PAGODA_WITH_CUDA
#include "backend/cuda_backend.h"
#include "parallel/cuda/nccl_group.h"
#endif

namespace pagoda::cli {

void ModelFlags::Add(CLI::App* app) {
  app->add_option("--model", model,
                  "a .gguf file, a llama2.c .bin (with --tokenizer), a Hugging Face directory, "
                  "or dummy:<preset> (default: the embedded pagoda-tiny)");
  // No --model: the model compiled into the binary (cli/default_model.h), resolved once the
  // command line is parsed, so every use of `model` (names, chat template, loaders) sees a path.
  app->parse_complete_callback([this] {
    if (model.empty()) {
      model = EmbeddedDefaultModelPath();
      embedded_default = true;
    }
  });
  app->add_option("--tokenizer", tokenizer, "tokenizer file (tok*.bin, tokenizer.json, tokenizer.model)");
  app->add_option("--dtype", dtype, "weight dtype of dummy models: bf16 | f16 | f32 | q8_0 | q4_0")
      ->capture_default_str();
  app->add_option("--kv-cache-dtype", kv_cache_dtype,
                  "KV cache dtype: auto | f32 | bf16 | fp16 | fp8 (= fp8_e4m3) | fp8_e5m2 | int8 | int4 | "
                  "nvfp4 | kivi2 (auto: f32 for f32 weights, else bf16)")
      ->capture_default_str();
  app->add_option("--kv-quant-group-size", kv_quant_group_size,
                  "values per scale of int8/int4/kivi2 KV (the head dim when smaller)")->capture_default_str();
  app->add_option("--kv-cache-dtype-skip-layers", kv_skip_layers,
                  "layers whose KV stays bf16 with a quantized --kv-cache-dtype, e.g. 0,31");
  app->add_option("--kv-sink-tokens", kv_sink_tokens, "first tokens of each sequence kept bf16 (quantized KV)")
      ->capture_default_str();
  app->add_option("--kv-recent-tokens", kv_recent_tokens,
                  "recent tokens kept bf16 (quantized KV; within the query's own block)")->capture_default_str();
  app->add_option("--kv-heavy-tokens", kv_heavy_tokens,
                  "per block, tokens with the most attention mass kept bf16 (quantized KV)")
      ->capture_default_str();
  app->add_option("--block-size", block_size, "tokens per KV block (power of two, 1..256)")->capture_default_str();
  app->add_option("--max-model-len", max_model_len, "context length (default: the model's)");
  app->add_option("--threads", threads, "CPU threads (default: all cores)");
  app->add_option("--device", device, "where the model runs: cpu | cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app->add_flag("--enforce-eager", enforce_eager,
                "launch every op of a decode step (no CUDA graphs; as vLLM's --enforce-eager)");
  app->add_option("--tensor-parallel-size", tensor_parallel_size,
                  "shard the model over N ranks (Megatron style): N GPUs over NCCL, or N CPU threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

std::unique_ptr<Model> ModelFlags::LoadModel() const {
  if (threads > 0) SetNumThreads(threads);
  LoadOptions options;
  options.dtype = dtype;
  options.seed = seed_weights;
  const bool sharded = tensor_parallel_size > 1;
#ifdef PAGODA_WITH_CUDA
  std::unique_ptr<CommunicatorGroup> gpus;  // made first: too few GPUs fails before any loading
#endif
  if (device == "cuda") {
#ifdef PAGODA_WITH_CUDA
    // Sharded: the whole model is read on the host, each rank's shard goes to its GPU.
    if (sharded) {
      gpus = std::make_unique<NcclGroup>(tensor_parallel_size);
    } else {
      options.backend = &DefaultCudaBackend();
    }
#else
    ThrowUnsupported("--device cuda: this pagoda was built without CUDA (configure with -DPAGODA_CUDA=ON)");
#endif
  }
  std::unique_ptr<Model> m = pagoda::LoadModel(model, options);
  if (sharded) {
    if (device == "cpu") {
      m = TensorParallelModel::OnCpu(std::move(m), tensor_parallel_size);
    } else {
#ifdef PAGODA_WITH_CUDA
      m = TensorParallelModel::Make(std::move(m), std::move(gpus),
                                    [](int rank) { return std::make_unique<CudaBackend>(rank); });
#endif
    }
  }
  // Every command ends its steps with the logits in host memory, which step graphs need.
  m->backend().EnableStepGraphs(!enforce_eager);
  return m;
}

std::unique_ptr<Tokenizer> ModelFlags::LoadTokenizer(const Model& m) const {
  return LoadTokenizerForModel(model, tokenizer, m.spec().vocab_size);
}

KVQuantOptions ModelFlags::KVQuant() const {
  PAGODA_ENSURE(kv_quant_group_size > 0, ErrorCode::kInvalidArgument,
                "--kv-quant-group-size must be positive, got " << kv_quant_group_size);
  PAGODA_ENSURE(kv_sink_tokens >= 0 && kv_recent_tokens >= 0, ErrorCode::kInvalidArgument,
                "--kv-sink-tokens and --kv-recent-tokens must be >= 0");
  KVQuantOptions o;
  o.group_size = kv_quant_group_size;
  o.block_size = block_size;
  for (int32_t l : ParseIdList(kv_skip_layers, "--kv-cache-dtype-skip-layers")) o.skip_layers.push_back(l);
  o.sink_tokens = kv_sink_tokens;
  o.recent_tokens = kv_recent_tokens;
  PAGODA_ENSURE(kv_heavy_tokens >= 0 && kv_heavy_tokens <= block_size, ErrorCode::kInvalidArgument,
                "--kv-heavy-tokens must be in 0.." << block_size << " (the block size)");
  o.heavy_tokens = kv_heavy_tokens;
  return o;
}

DType ModelFlags::KVDType(const Model& m) const {
  const KVCacheDType model_default = m.spec().weight_dtype == DType::kF32 ? KVCacheDType::kF32 : KVCacheDType::kBF16;
  switch (ParseKVCacheDType(kv_cache_dtype, model_default)) {
    case KVCacheDType::kF32: return DType::kF32;
    case KVCacheDType::kBF16: return DType::kBF16;
    case KVCacheDType::kF16: return DType::kF16;
    default:
      ThrowUnsupported("--kv-cache-dtype " + kv_cache_dtype + " is not available on this path yet");
  }
}

void EngineFlags::Add(CLI::App* app) {
  app->add_option("--kv-cache-memory", kv_cache_memory, "KV cache size, e.g. 512MiB or 2GiB (default: half the available RAM)");
  app->add_option("--gpu-memory-utilization", gpu_memory_utilization,
                  "fraction of device memory for weights, activations and KV (default 0.9 on a GPU)");
  app->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", enable_prefix_caching,
                "automatic prefix caching (default on)");
  app->add_option("--prefix-caching-hash-algo", prefix_caching_hash_algo, "sha256 | xxhash")->capture_default_str();
  app->add_option("--max-num-seqs", max_num_seqs, "most requests running at once")->capture_default_str();
  app->add_option("--max-num-batched-tokens", max_num_batched_tokens, "token budget of one step")->capture_default_str();
  app->add_option("--cuda-graph-sizes", cuda_graph_sizes,
                  "--device cuda: decode batch sizes to pad to and capture graphs for at start-up: auto (1, 2, 4, "
                  "then multiples of 8 up to --max-num-seqs, as vLLM), a list such as 1,2,4,8,16, or none (a "
                  "graph per batch size, captured on its second step)")
      ->capture_default_str();
}

EngineConfig EngineFlags::MakeConfig(const ModelFlags& flags, Model& model) const {
  EngineConfig c;
  const KVCacheDType model_default =
      model.spec().weight_dtype == DType::kF32 ? KVCacheDType::kF32 : KVCacheDType::kBF16;
  KVCacheSizingOptions o;
  o.shape = model.spec().kv_shape();
  o.kv_copies = model.KVCopies();
  o.dtype = ParseKVCacheDType(flags.kv_cache_dtype, model_default);
  o.quant = flags.KVQuant();
  o.block_size = flags.block_size;
  o.max_model_len = flags.max_model_len > 0 ? flags.max_model_len : model.spec().max_position;
  if (!kv_cache_memory.empty()) o.kv_cache_memory_bytes = ParseMemorySize(kv_cache_memory);
  o.gpu_memory_utilization = gpu_memory_utilization;
  // Profile a dummy batch as vLLM does: the workspace of the largest step the scheduler can
  // make is allocated now, and it and the weights stay outside the KV budget.
  model.ReserveWorkspace(max_num_batched_tokens, max_num_seqs);
  o.non_kv_bytes = model.WeightBytesPerToken() + model.workspace_bytes();
  // A device with its own memory (CUDA): the budget is --gpu-memory-utilization (default 0.9)
  // of the device, less what this process took for the weights and scratch.
  if (const Backend::MemoryInfo mem = model.backend().DeviceMemory(); mem.total > 0) {
    o.device_total_bytes = mem.total;
    o.non_kv_bytes = mem.used;
    o.device_free_bytes = mem.free_at_start;
    if (!o.gpu_memory_utilization) o.gpu_memory_utilization = kDefaultGpuMemoryUtilization;
  }
  // On the CPU, never take more than the sequences the engine could run at once.
  o.max_kv_tokens = max_num_seqs * o.max_model_len;
  o.max_num_seqs = max_num_seqs;
  c.kv = ComputeKVCacheConfig(o);
  c.kv_quant = o.quant;
  PAGODA_LOG(kInfo) << FormatKVCacheConfig(c.kv);
  c.scheduler.max_model_len = o.max_model_len;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  c.enable_prefix_caching = enable_prefix_caching;
  c.prefix_hash_algo = ParsePrefixHashAlgo(prefix_caching_hash_algo);
  // Checked on every device; padding only where decode steps run as graphs.
  const std::vector<int64_t> sizes = ParseDecodeBatchSizes(cuda_graph_sizes, max_num_seqs);
  if (flags.device == "cuda" && !flags.enforce_eager) c.decode_batch_sizes = sizes;
  return c;
}

std::vector<int32_t> ParseIdList(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == '\n' || text[i] == '\t')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\n' && text[j] != '\t') ++j;
    const std::string tok = text.substr(i, j - i);
    try {
      size_t used = 0;
      const long long v = std::stoll(tok, &used);
      if (used != tok.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(tok);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      ThrowInvalidArgument(flag + ": '" + tok + "' is not a token id (expected e.g. 1,2,3)");
    }
    i = j;
  }
  return ids;
}

}  // namespace pagoda::cli
