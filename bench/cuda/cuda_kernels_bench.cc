// pagoda_cuda_bench: the CUDA backend's kernels on the device, timed, as ratios to ceilings
// measured in the same run (run by scripts/gpu-check beside ../shared/tools/gpu_baselines.py).
//
//   pagoda_cuda_bench [--quick] [--gemm-only] [--attention-only] [--prefill-attention-only]
//                     [--decode-attention-only] [--sampling-only] [--model-only] [--shapes-only]
//                     [--model dummy:llama-3-8b]
//                     [--enforce-eager]
//                     [--profile-decode B]  (decode at batch B only, its last 2 graphed steps in a
//                                            profiler range: ncu --profile-from-start off)
//
// Prints one line per measurement:
//   copy      device-to-device copy of 2 GiB: GB/s counting bytes read + written (the decode
//             roofline);
//   gemm      bf16 MatMul y = x W^T at m rows for Llama-3-8B's projection shapes: TFLOP/s and the
//             weight-read GB/s (the decode view); weights rotate over 4 copies (> L2);
//   decode-attn paged decode attention, one query token per sequence: GB/s of K/V read once;
//   decode-mla  MLA's absorbed decode over the latent cache (DeepSeek-V3's shapes): GB/s;
//   prefill-attn causal prefill attention, gpu_baselines.py's SDPA shapes: TFLOP/s;
//   sample    Backend::Sample of 128256-token logits on the device: us per step (BenchSampling);
//   prefill/decode  with --model: the whole model through Model::Forward (BenchModel), and
//             without --quick batch 64 at 8K-token contexts per KV format (BenchLongContextDecode).
// Each figure is the median of repeated timings after a warm-up (host clock around
// synchronized batches of launches).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "backend/step_description.h"
#include "core/dtype.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/params/attention_params.h"
#include "kernels/params/sampling_params.h"
#include "kv/kv_codec.h"
#include "kv/kv_format.h"
#include "model/model.h"

namespace pagoda {
namespace {

// Median seconds per call of fn over `reps` batches of `inner` calls.
double Time(CudaBackend& gpu, const std::function<void()>& fn, int inner, int reps) {
  for (int i = 0; i < inner; ++i) fn();
  gpu.Synchronize();
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) fn();
    gpu.Synchronize();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TensorView Device(CudaBackend& gpu, std::vector<std::shared_ptr<float>>* keep, int64_t rows, int64_t cols,
                  uint32_t seed) {
  keep->push_back(gpu.Allocate(rows * cols));
  const TensorView v = TensorView::F32(keep->back().get(), rows, cols, Device::kCuda);
  const auto host = Random(rows * cols, seed);
  gpu.Upload(host.data(), v);
  return v;
}

double CopyBandwidth(CudaBackend& gpu) {
  std::vector<std::shared_ptr<float>> keep;
  const int64_t floats = int64_t{1} << 29;  // 2 GiB
  keep.push_back(gpu.Allocate(floats));
  const TensorView a = TensorView::F32(keep.back().get(), 1, floats, Device::kCuda);
  gpu.Fill(a, 1.25f);  // the copy's speed does not depend on the values
  keep.push_back(gpu.Allocate(floats));
  const TensorView b = TensorView::F32(keep.back().get(), 1, floats, Device::kCuda);
  const double t = Time(gpu, [&] { gpu.Copy(a, b); }, 3, 7);
  return 2.0 * floats * 4 / t / 1e9;
}

void BenchGemm(CudaBackend& gpu, bool quick, double copy_gbs) {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096},
                          {"o 4096x4096", 4096, 4096},
                          {"gate_up 28672x4096", 28672, 4096},
                          {"down 4096x14336", 4096, 14336}};
  std::vector<int64_t> ms = {1, 16, 64, 512, 4096};
  if (quick) ms = {1, 64, 4096};
  for (const Shape& s : shapes) {
    std::vector<uint16_t> bits(static_cast<size_t>(s.n * s.k));
    {
      const auto v = Random(s.n * s.k, 7);
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = F32ToBf16(v[i] * 0.02f);
    }
    WeightMatrix wm;
    wm.dtype = DType::kBF16;
    wm.rows = s.n;
    wm.cols = s.k;
    wm.row_bytes = s.k * 2;
    wm.data = bits.data();
    std::vector<Weight> copies;
    for (int c = 0; c < 4; ++c) copies.push_back(gpu.PrepareWeight(wm));
    std::vector<std::shared_ptr<float>> keep;
    const int64_t max_m = ms.back();
    const TensorView x = Device(gpu, &keep, max_m, s.k, 11), y = Device(gpu, &keep, max_m, s.n, 12);
    for (int64_t m : ms) {
      int c = 0;
      const double t = Time(
          gpu, [&] { gpu.MatMul(copies[c++ % 4], x.RowRange(0, m), y.RowRange(0, m)); }, m >= 512 ? 8 : 40, 9);
      const double tflops = 2.0 * m * s.n * s.k / t / 1e12;
      const double gbs = (2.0 * s.n * s.k + 4.0 * m * (s.k + s.n)) / t / 1e9;
      std::printf("gemm %-20s m=%-5lld %8.1f us  %7.1f TFLOP/s  %7.0f GB/s (%4.1f%% of copy)\n", s.name,
                  static_cast<long long>(m), t * 1e6, tflops, gbs, 100.0 * gbs / copy_gbs);
    }
  }
}

// Every slot of tokens [0, context) of each sequence's table in layers [0, layers): one
// prefill-shaped WriteKV of the rows k and v (reused: a decode's cost does not depend on the
// values) per chunk of at most k.rows tokens, which builds quickly on the host.
void FillCache(CudaBackend& gpu, KVCache& cache, const std::vector<std::vector<int32_t>>& tables, int64_t context,
               int64_t block, int64_t layers, const TensorView& k, const TensorView& v) {
  const std::vector<int32_t> tokens(context, 5);
  StepBuilder builder;
  for (const std::vector<int32_t>& table : tables) {
    for (int64_t first = 0; first < context; first += k.rows) {
      const int64_t count = std::min(k.rows, context - first);
      builder.Reset(block);
      builder.AddSequence(tokens, first, count, table);
      gpu.BeginStep(builder.Finish(), cache);
      for (int64_t l = 0; l < layers; ++l) gpu.WriteKV(cache, l, k.RowRange(0, count), v.RowRange(0, count));
    }
  }
}

// The decode step of each sequence's last cached token (position context - 1).
void BeginLastTokens(CudaBackend& gpu, KVCache& cache, const std::vector<std::vector<int32_t>>& tables, int64_t context,
                     int64_t block) {
  const std::vector<int32_t> tokens(context, 5);
  StepBuilder builder;
  builder.Reset(block);
  for (const std::vector<int32_t>& table : tables) builder.AddSequence(tokens, context - 1, 1, table);
  gpu.BeginStep(builder.Finish(), cache);
}

void BenchDecodeAttention(CudaBackend& gpu, int64_t batch, int64_t context, double copy_gbs,
                          KVQuant quant = KVQuant::kNone, int64_t sink = 0, int64_t recent = 0) {
  const int64_t heads = 32, kv_heads = 8, dim = 128, block = 16;
  const int64_t blocks_per_seq = (context + block - 1) / block;
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = batch * blocks_per_seq;
  shape.block_size = block;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = dim;
  shape.dtype = DType::kBF16;
  shape.quant = quant;
  shape.sink_tokens = sink;
  shape.recent_tokens = recent;
  auto cache = gpu.CreateKVCache(shape);
  std::vector<std::shared_ptr<float>> keep;
  // Random block ids: the tables scattered over the cache.
  std::vector<int32_t> ids(shape.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
  std::vector<std::vector<int32_t>> tables(batch);
  for (int64_t s = 0; s < batch; ++s) {
    tables[s].assign(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
  }
  const int64_t chunk = 4096;
  const TensorView kr = Device(gpu, &keep, chunk, kv_heads * dim, 21), vr = Device(gpu, &keep, chunk, kv_heads * dim, 22);
  FillCache(gpu, *cache, tables, context, block, 1, kr, vr);
  BeginLastTokens(gpu, *cache, tables, context, block);
  const TensorView q = Device(gpu, &keep, batch, heads * dim, 23), out = Device(gpu, &keep, batch, heads * dim, 24);
  AttentionLayer a;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = dim;
  a.scale = 0.088f;
  const double t = Time(gpu, [&] { gpu.PagedAttention(*cache, 0, a, q, out); }, 5, 9);
  // The bytes the cache holds for these tokens (codes and scales for quantized formats; kivi2's
  // keys: the block's per-channel scales spread over its tokens).
  const KVLayerFormats f = LayerKVFormats(shape, 0);
  const double bytes =
      static_cast<double>(batch) * context * static_cast<double>(KVBlockBytes(f.k) + KVBlockBytes(f.v)) / block;
  const bool side_pool = quant == KVQuant::kKivi2 || sink > 0 || recent > 0;
  const std::string policy = sink > 0 || recent > 0 ? " sink " + std::to_string(sink) + " recent " + std::to_string(recent) : "";
  const char* path = !side_pool ? ""
                     : cuda::SidePoolFlashOn() ? "  (side pool: codes spans on FlashAttention)"
                                               : "  (side pool: SIMT)";
  std::printf("decode-attn batch=%lld ctx=%lld 32q/8kv d128 %-8s %8.1f us  %7.0f GB/s (%4.1f%% of copy)%s%s\n",
              static_cast<long long>(batch), static_cast<long long>(context),
              quant == KVQuant::kNone ? "bf16" : KVQuantName(quant), t * 1e6, bytes / t / 1e9,
              100.0 * bytes / t / 1e9 / copy_gbs, policy.c_str(), path);
}

// --shapes-only: decode steps of 64 and 128 sequences on the split shape (a warp a segment,
// then a merge) and on the narrow one (a warp walks its token's segments): the same bits; which
// is faster by batch and context (the model's batch-64 decode has 512-640-token contexts).
void BenchDecodeShapes(CudaBackend& gpu, double copy_gbs) {
  for (const int64_t batch : {int64_t{64}, int64_t{128}}) {
    for (const int64_t context : {int64_t{576}, int64_t{2048}, int64_t{8192}}) {
      for (const int64_t split_max : {cuda::kFlashSplitMaxTokens, int64_t{0}}) {
        cuda::SetFlashSplitMaxTokens(split_max);
        std::printf("  [%s] ", split_max > 0 ? "split " : "narrow");
        std::fflush(stdout);
        BenchDecodeAttention(gpu, batch, context, copy_gbs);
      }
    }
  }
  cuda::SetFlashSplitMaxTokens(cuda::kFlashSplitMaxTokens);
}

// MLA decode in its absorbed form over the latent cache (DeepSeek-V3: kv_lora_rank 512 + rope 64
// a token, bf16, one latent shared by every head): GB/s of the latent read once, against the copy.
// `heads`: 128 (the whole model on one GPU) or 16 (a tensor-parallel rank of 8; FlashMLA's shape).
void BenchMlaDecode(CudaBackend& gpu, int64_t batch, int64_t context, int64_t heads, double copy_gbs) {
  const int64_t rank = 512, rope = 64, block = 16;
  const int64_t blocks_per_seq = (context + block - 1) / block;
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = batch * blocks_per_seq;
  shape.block_size = block;
  shape.num_kv_heads = 1;
  shape.head_dim = rank;
  shape.head_dim_v = rope;
  shape.dtype = DType::kBF16;
  auto cache = gpu.CreateKVCache(shape);
  std::vector<std::shared_ptr<float>> keep;
  std::vector<std::vector<int32_t>> tables(batch);
  for (int64_t s = 0; s < batch; ++s) {
    tables[s].resize(blocks_per_seq);
    std::iota(tables[s].begin(), tables[s].end(), static_cast<int32_t>(s * blocks_per_seq));
  }
  const int64_t chunk = 4096;
  const TensorView lat = Device(gpu, &keep, chunk, rank, 61), pe = Device(gpu, &keep, chunk, rope, 62);
  FillCache(gpu, *cache, tables, context, block, 1, lat, pe);
  BeginLastTokens(gpu, *cache, tables, context, block);
  const TensorView q = Device(gpu, &keep, batch, heads * (rank + rope), 63), out = Device(gpu, &keep, batch, heads * rank, 64);
  const double t = Time(gpu, [&] { gpu.MlaAttention(*cache, 0, heads, 0.072f, q, out); }, 3, 5);
  const double bytes = static_cast<double>(batch) * context * (rank + rope) * 2;
  std::printf("decode-mla batch=%lld ctx=%lld %lldq rank512+rope64 bf16 %8.1f us  %7.0f GB/s (%4.1f%% of copy)\n",
              static_cast<long long>(batch), static_cast<long long>(context), static_cast<long long>(heads), t * 1e6,
              bytes / t / 1e9, 100.0 * bytes / t / 1e9 / copy_gbs);
}

// Causal prefill attention over the paged cache, the shapes gpu_baselines.py gives SDPA: batch
// max(1, 16384 / S) * 2, 32 heads of 128 (64 of 64), no GQA; every sequence's S tokens in one
// step. TFLOP/s counts 2 * B * H * S^2 * D (the causal half of the four products' work).
// q, kv and out: [32768, 4096] device rows, filled once for every shape (batch * seq = 32768).
void BenchPrefillAttention(CudaBackend& gpu, int64_t seq, int64_t dim, const TensorView& q, const TensorView& kv,
                           const TensorView& out, KVQuant quant = KVQuant::kNone) {
  // PAGODA_BENCH_BLOCK: the cache's block size (default 16, vLLM's; TMA copies a tile in boxes of
  // min(block, 64) rows).
  static const int64_t block = [] {
    const char* e = std::getenv("PAGODA_BENCH_BLOCK");
    return e != nullptr ? std::max<int64_t>(1, std::atoll(e)) : int64_t{16};
  }();
  const int64_t batch = std::max<int64_t>(1, 16384 / seq) * 2, heads = dim == 128 ? 32 : 64;
  const int64_t blocks_per_seq = (seq + block - 1) / block;
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = batch * blocks_per_seq;
  shape.block_size = block;
  shape.num_kv_heads = heads;
  shape.head_dim = dim;
  shape.dtype = DType::kBF16;
  shape.quant = quant;
  auto cache = gpu.CreateKVCache(shape);
  std::vector<std::vector<int32_t>> tables(batch);
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
  }
  std::vector<int32_t> tokens(seq, 5);
  StepBuilder builder;
  builder.Reset(block);
  for (int64_t s = 0; s < batch; ++s) builder.AddSequence(tokens, 0, seq, tables[s]);
  gpu.BeginStep(builder.Finish(), *cache);
  gpu.WriteKV(*cache, 0, kv, kv);
  AttentionLayer a;
  a.num_heads = heads;
  a.num_kv_heads = heads;
  a.head_dim = dim;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  const double t = Time(gpu, [&] { gpu.PagedAttention(*cache, 0, a, q, out); }, 2, 5);
  const double flops = 2.0 * batch * heads * seq * seq * dim;
  std::printf("prefill-attn causal B=%lld H=%lld S=%lld D=%lld block=%lld %s  %9.1f us  %7.1f TFLOP/s\n",
              static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(seq),
              static_cast<long long>(dim), static_cast<long long>(block),
              quant == KVQuant::kNone ? "bf16" : KVQuantName(quant), t * 1e6, flops / t / 1e12);
}

void BenchPrefillAttentions(CudaBackend& gpu, bool quick) {
  std::vector<std::shared_ptr<float>> keep;
  const TensorView q = Device(gpu, &keep, 32768, 4096, 31), kv = Device(gpu, &keep, 32768, 4096, 32);
  const TensorView out = Device(gpu, &keep, 32768, 4096, 33);
  for (const int64_t dim : {int64_t{64}, int64_t{128}}) {
    for (const int64_t seq : {int64_t{1024}, int64_t{4096}, int64_t{16384}}) {
      if (!quick || seq != 16384) BenchPrefillAttention(gpu, seq, dim, q, kv, out);
    }
  }
  // The same prefill over fp8, int8, int4 and nvfp4 caches (the rows written quantized, read raw
  // and converted in the kernel), d128 at 4K tokens.
  for (const KVQuant quant : {KVQuant::kFp8E4M3, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4}) {
    BenchPrefillAttention(gpu, 4096, 128, q, kv, out, quant);
  }
  // kivi2 (its codes spans on one-warp blocks, the own blocks' keys on the SIMT rest kernel) at
  // 1K tokens, d128: the narrow shape (a warp a token), then one-warp work items (16 / G tokens a
  // warp, PAGODA_FLASH_KIVI2_ITEMS); the label says which.
  const bool items = cuda::FlashKivi2Items();
  for (const bool on : {false, true}) {
    cuda::SetFlashKivi2Items(on);
    std::printf("  [kivi2 %s] ", on ? "work items" : "narrow");
    BenchPrefillAttention(gpu, 1024, 128, q, kv, out, KVQuant::kKivi2);
  }
  cuda::SetFlashKivi2Items(items);
}

// A whole model on the GPU through Model::Forward: prefill of `input` tokens per sequence, then
// `output` decode steps of the whole batch (one token per sequence per step, the logits left in
// the backend's LogitsBuffer and the greedy tokens chosen there, as the engine takes them). The floor of a decode step is its bytes (weights once,
// plus every sequence's K/V) over the copy bandwidth.
// Sampling a step's logits left on the device (LogitsBuffer, Llama 3's 128256 tokens) at a few
// batch sizes: greedy (arg max), drawn (temperature 0.7 with top-p 0.9 and top-k 50, 512-token
// histories under a repetition penalty, 5 logprobs), and the host path the drawn rows took before
// (the logits copied back, the CPU sampler): microseconds per step.
void BenchSampling(CudaBackend& gpu, bool quick) {
  const int64_t vocab = 128256;
  Backend& cpu = DefaultCpuBackend();
  for (const int64_t batch : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}}) {
    const auto logits = Random(batch * vocab, 17);
    const TensorView buffer = gpu.LogitsBuffer(batch, vocab);
    gpu.Upload(logits.data(), buffer);
    std::vector<int32_t> history(512);
    for (size_t i = 0; i < history.size(); ++i) history[i] = static_cast<int32_t>((i * 7919) % vocab);
    auto time_rows = [&](Backend& b, const SamplingParams& p, bool logprobs, bool host) {
      std::vector<std::unique_ptr<SamplerState>> states;
      std::vector<SampleRow> rows(static_cast<size_t>(batch));
      std::vector<TokenLogprobs> lp(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        SamplingParams q = p;
        q.seed = i;
        states.push_back(b.CreateSampler(q));
        rows[i].state = states.back().get();
        rows[i].prompt = history;
        if (logprobs) rows[i].logprobs = &lp[i];
      }
      std::vector<float> copy(static_cast<size_t>(batch * vocab));
      return Time(gpu, [&] {
        if (host) {
          gpu.CopyToHost(buffer, copy.data());
          b.Sample(TensorView::F32(copy.data(), batch, vocab), rows);
        } else {
          b.Sample(buffer, rows);
        }
      }, 1, host ? 3 : (quick ? 5 : 15));
    };
    SamplingParams greedy;
    greedy.temperature = 0.0;
    SamplingParams drawn;
    drawn.temperature = 0.7;
    drawn.top_p = 0.9;
    drawn.top_k = 50;
    drawn.repetition_penalty = 1.1;
    drawn.logprobs = 5;
    SamplingParams plain;
    plain.temperature = 0.7;
    const double g = time_rows(gpu, greedy, false, false);
    const double t = time_rows(gpu, plain, false, false);
    const double d = time_rows(gpu, drawn, true, false);
    const double h = batch <= 64 ? time_rows(cpu, drawn, true, true) : 0.0;
    char host[64] = "";
    if (h > 0) std::snprintf(host, sizeof(host), "  host path %9.0f us (%.0fx)", h * 1e6, h / d);
    std::printf("sample vocab=%lld batch=%lld  greedy %7.0f us  T=0.7 %7.0f us  T=0.7+top-p/k+penalty+logprobs %7.0f us%s\n",
                static_cast<long long>(vocab), static_cast<long long>(batch), g * 1e6, t * 1e6, d * 1e6, host);
  }
}

// profile_batch > 0: only decode at that batch, and its last kProfilerSteps graphed steps inside
// a profiler range (SetProfiling), for `ncu --profile-from-start off` (gpu-check's profile).
constexpr int64_t kProfilerSteps = 2;

// Seconds per op kind over `steps` eager steps (CudaBackend::OpTimes), as us per step.
void PrintOpTimes(const std::string& what, const std::vector<std::pair<std::string, double>>& times, int64_t steps) {
  std::string ops;
  double total = 0;
  for (const auto& [op, sec] : times) {
    total += sec;
    char buf[96];
    std::snprintf(buf, sizeof(buf), " %s %.0f", op.c_str(), sec / steps * 1e6);
    ops += buf;
  }
  std::printf("ops (eager, synchronized, us per step) %s: total %.0f:%s\n", what.c_str(), total / steps * 1e6,
              ops.c_str());
}

void BenchLongContextDecode(CudaBackend& gpu, Model& model, const std::string& name, double copy_gbs);

// One greedy device sampler a sequence (kept in `states`), as the engine's rows for Sample.
std::vector<SampleRow> GreedyRows(CudaBackend& gpu, int64_t batch, std::vector<std::unique_ptr<SamplerState>>* states) {
  SamplingParams greedy;
  greedy.temperature = 0.0;
  std::vector<SampleRow> rows(batch);
  for (int64_t s = 0; s < batch; ++s) {
    states->push_back(gpu.CreateSampler(greedy));
    rows[s].state = states->back().get();
  }
  return rows;
}

void BenchModel(CudaBackend& gpu, const std::string& name, double copy_gbs, bool quick, bool graphs,
                int64_t profile_batch) {
  LoadOptions options;
  options.backend = &gpu;
  const auto t_load = std::chrono::steady_clock::now();
  auto model = LoadModel(name, options);
  gpu.EnableStepGraphs(graphs);
  std::printf("model %s loaded in %.1f s\n", name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  const int64_t vocab = model->spec().vocab_size, block = 16;
  const double weight_bytes = static_cast<double>(model->WeightBytesPerToken());
  const KVStorageShape one = model->KVShapeFor(1, 1, DType::kBF16);
  const double kv_bytes_per_token =
      2.0 * one.num_layers * one.num_kv_heads * one.head_dim * 2;  // K and V, bf16
  auto tokens_for = [&](int64_t n, int64_t seed) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(1 + (i * 7919 + seed * 104729) % (vocab - 1));
    return t;
  };
  // Prefill alone: one sequence of n tokens.
  for (int64_t n : {int64_t{512}, int64_t{4096}}) {
    if (profile_batch > 0) break;
    const int64_t blocks = (n + block) / block + 1;
    auto cache = gpu.CreateKVCache(model->KVShapeFor(blocks, block, DType::kBF16));
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    model->ReserveWorkspace(n, 1);
    std::vector<float> logits(vocab);
    StepBuilder builder;
    const auto tokens = tokens_for(n, 1);
    const double t = Time(
        gpu, [&] { ForwardSequence(*model, *cache, builder, tokens, 0, n, table, LogitRows::kLast, logits.data()); },
        1, quick ? 3 : 5);
    std::printf("prefill %s n=%lld  %8.2f ms  %9.0f tokens/s  %6.1f TFLOP/s (2 x weights x tokens)\n", name.c_str(),
                static_cast<long long>(n), t * 1e3, n / t, 2.0 * weight_bytes / 2 * n / t / 1e12);
    // Where the time goes: one more pass, every op synchronized and timed.
    gpu.EnableOpTimes(true);
    ForwardSequence(*model, *cache, builder, tokens, 0, n, table, LogitRows::kLast, logits.data());
    PrintOpTimes("prefill n=" + std::to_string(n), gpu.OpTimes(), 1);
    gpu.EnableOpTimes(false);
  }
  const int64_t input = 512, output = quick ? 32 : 128;
  for (int64_t batch : {int64_t{1}, int64_t{64}}) {
    if (profile_batch > 0 && batch != profile_batch) continue;
    constexpr int64_t kProfiled = 2;  // eager steps after the timed ones, each op timed
    const int64_t per_seq = (input + output + kProfiled + block - 1) / block;
    auto cache = gpu.CreateKVCache(model->KVShapeFor(batch * per_seq, block, DType::kBF16));
    model->ReserveWorkspace(std::max(input, batch), batch);
    std::vector<std::vector<int32_t>> tables(batch), tokens(batch);
    std::vector<float> logits(batch * vocab);
    StepBuilder builder;
    for (int64_t s = 0; s < batch; ++s) {
      tables[s].resize(per_seq);
      std::iota(tables[s].begin(), tables[s].end(), static_cast<int32_t>(s * per_seq));
      tokens[s] = tokens_for(input + output + kProfiled, s);
      ForwardSequence(*model, *cache, builder, tokens[s], 0, input, tables[s], LogitRows::kLast, logits.data());
    }
    std::vector<std::unique_ptr<SamplerState>> states;
    std::vector<SampleRow> rows = GreedyRows(gpu, batch, &states);
    auto decode = [&](const StepDescription& step) {
      const TensorView device_logits = gpu.LogitsBuffer(batch, vocab);
      model->Forward(step, gpu, *cache, device_logits);
      gpu.Sample(device_logits, rows);
    };
    std::vector<double> step_s;
    for (int64_t i = 0; i < output; ++i) {
      gpu.Synchronize();
      if (profile_batch > 0 && i == output - kProfilerSteps) gpu.SetProfiling(true);
      const auto t0 = std::chrono::steady_clock::now();
      builder.Reset(block);
      for (int64_t s = 0; s < batch; ++s) {
        const int64_t index = builder.AddSequence(tokens[s], input + i, 1, tables[s]);
        builder.AddLogits(index);
      }
      decode(builder.Finish());
      gpu.Synchronize();
      step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (profile_batch > 0) gpu.SetProfiling(false);
    std::sort(step_s.begin(), step_s.end());
    const double t = step_s[step_s.size() / 2];
    // Where a step's time goes: the same step eagerly, every op synchronized and timed.
    gpu.EnableStepGraphs(false);
    gpu.EnableOpTimes(true);
    for (int64_t i = output; i < output + kProfiled; ++i) {
      builder.Reset(block);
      for (int64_t s = 0; s < batch; ++s) builder.AddLogits(builder.AddSequence(tokens[s], input + i, 1, tables[s]));
      decode(builder.Finish());
    }
    PrintOpTimes("batch=" + std::to_string(batch), gpu.OpTimes(), kProfiled);
    gpu.EnableOpTimes(false);
    gpu.EnableStepGraphs(graphs);
    const double floor_s = (weight_bytes + batch * (input + output / 2.0) * kv_bytes_per_token) / (copy_gbs * 1e9);
    std::printf("decode%s %s batch=%lld in=%lld out=%lld  step %7.2f ms  %8.0f tokens/s  floor %7.2f ms  %4.1f%% of floor\n",
                graphs ? "" : "(eager)", name.c_str(), static_cast<long long>(batch), static_cast<long long>(input),
                static_cast<long long>(output), t * 1e3, batch / t, floor_s * 1e3, 100.0 * floor_s / t);
  }
  if (!quick && profile_batch == 0 && graphs) BenchLongContextDecode(gpu, *model, name, copy_gbs);
}

// Batch 64 at 8K-token contexts by KV format (bf16, fp8 e4m3, int8, int4, nvfp4): every layer's cache written
// with random rows (a decode's cost does not depend on the values; a prefill of 64 x 8K tokens
// would take most of the run), then graphed decode steps, against the floor of the weights and
// the format's K/V bytes.
void BenchLongContextDecode(CudaBackend& gpu, Model& model, const std::string& name, double copy_gbs) {
  const int64_t batch = 64, context = 8192, steps = 16, block = 16;
  const int64_t vocab = model.spec().vocab_size;
  const int64_t per_seq = (context + steps + block - 1) / block;
  for (const KVQuant quant : {KVQuant::kNone, KVQuant::kFp8E4M3, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4}) {
    KVStorageShape shape = model.KVShapeFor(batch * per_seq, block, DType::kBF16);
    shape.quant = quant;
    auto cache = gpu.CreateKVCache(shape);
    const int64_t width = shape.num_kv_heads * shape.head_dim, chunk = 4096;
    std::vector<std::shared_ptr<float>> keep;
    const TensorView kr = Device(gpu, &keep, chunk, width, 51), vr = Device(gpu, &keep, chunk, width, 52);
    std::vector<std::vector<int32_t>> tables(batch);
    for (int64_t s = 0; s < batch; ++s) {
      tables[s].resize(per_seq);
      std::iota(tables[s].begin(), tables[s].end(), static_cast<int32_t>(s * per_seq));
    }
    FillCache(gpu, *cache, tables, context, block, shape.num_layers, kr, vr);
    std::vector<int32_t> tokens(context + steps, 5);
    StepBuilder builder;
    model.ReserveWorkspace(batch, batch);
    std::vector<std::unique_ptr<SamplerState>> states;
    std::vector<SampleRow> rows = GreedyRows(gpu, batch, &states);
    std::vector<double> step_s;
    for (int64_t i = 0; i < steps; ++i) {
      gpu.Synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      builder.Reset(block);
      for (int64_t s = 0; s < batch; ++s) builder.AddLogits(builder.AddSequence(tokens, context + i, 1, tables[s]));
      const TensorView logits = gpu.LogitsBuffer(batch, vocab);
      model.Forward(builder.Finish(), gpu, *cache, logits);
      gpu.Sample(logits, rows);
      gpu.Synchronize();
      step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(step_s.begin(), step_s.end());
    const double t = step_s[step_s.size() / 2];
    double kv_bytes_per_token = 0;
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      const KVLayerFormats f = LayerKVFormats(shape, l);
      kv_bytes_per_token += static_cast<double>(shape.num_kv_heads) * (KVRowBytes(f.k) + KVRowBytes(f.v));
    }
    const double floor_s =
        (static_cast<double>(model.WeightBytesPerToken()) + batch * (context + steps / 2.0) * kv_bytes_per_token) /
        (copy_gbs * 1e9);
    std::printf("decode %s batch=%lld ctx=%lld kv=%-8s step %7.2f ms  %8.0f tokens/s  floor %7.2f ms  %4.1f%% of floor"
                "  (%.0f KV bytes a token)\n",
                name.c_str(), static_cast<long long>(batch), static_cast<long long>(context),
                quant == KVQuant::kNone ? "bf16" : KVQuantName(quant), t * 1e3, batch / t, floor_s * 1e3,
                100.0 * floor_s / t, kv_bytes_per_token);
  }
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  using namespace pagoda;
  bool quick = false, eager = false, gemm_only = false, attention_only = false, sampling_only = false,
       model_only = false, prefill_only = false, shapes_only = false,
       decode_attention_only = false;
  int64_t profile_batch = 0;
  std::string model;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--enforce-eager") == 0) eager = true;
    if (std::strcmp(argv[i], "--gemm-only") == 0) gemm_only = true;
    if (std::strcmp(argv[i], "--attention-only") == 0) attention_only = true;
    if (std::strcmp(argv[i], "--prefill-attention-only") == 0) prefill_only = true;
    if (std::strcmp(argv[i], "--sampling-only") == 0) sampling_only = true;
    if (std::strcmp(argv[i], "--model-only") == 0) model_only = true;
    if (std::strcmp(argv[i], "--shapes-only") == 0) shapes_only = true;
    if (std::strcmp(argv[i], "--decode-attention-only") == 0) attention_only = decode_attention_only = true;
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
    if (std::strcmp(argv[i], "--profile-decode") == 0 && i + 1 < argc) profile_batch = std::atoll(argv[++i]);
  }
  try {
    CudaBackend& gpu = DefaultCudaBackend();
    std::printf("device: %s\n", gpu.DeviceSummary().c_str());
    if (sampling_only) {
      BenchSampling(gpu, quick);
      return 0;
    }
    if (profile_batch > 0) {  // the model's decode steps only, the last ones profiled
      BenchModel(gpu, model.empty() ? "dummy:llama-3-8b" : model, CopyBandwidth(gpu), true, !eager, profile_batch);
      return 0;
    }
    const double copy = CopyBandwidth(gpu);
    std::printf("copy d2d 2 GiB  %7.0f GB/s\n", copy);
    if (shapes_only) {
      BenchDecodeShapes(gpu, copy);
      return 0;
    }
    if (model_only) {
      BenchModel(gpu, model.empty() ? "dummy:llama-3-8b" : model, copy, quick, !eager, 0);
      return 0;
    }
    if (prefill_only) {
      BenchPrefillAttentions(gpu, quick);
      return 0;
    }
    if (!attention_only) BenchGemm(gpu, quick, copy);
    if (gemm_only) return 0;
    BenchDecodeAttention(gpu, 128, 4096, copy);
    BenchDecodeAttention(gpu, 32, 4096, copy);
    BenchDecodeAttention(gpu, 1, 32768, copy);
    for (const int64_t heads : {16, 128}) BenchMlaDecode(gpu, 64, 8192, heads, copy);
    // Quantized KV (fp8, int8 and int4 read in registers, nvfp4 dequantized to bf16 tiles) at
    // batch 64, 8K tokens (and 32K without --quick), against bf16.
    constexpr KVQuant kFormats[] = {KVQuant::kNone, KVQuant::kFp8E4M3, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4};
    for (const KVQuant q : kFormats) BenchDecodeAttention(gpu, 64, 8192, copy, q);
    // The side pool (kivi2; sink and recent tokens over int4 and fp8): each query's codes span on
    // FlashAttention and the rest (sink tokens, its own block's wide keys) on the SIMT kernel,
    // then the SIMT kernel alone for every key.
    for (const bool flash : {true, false}) {
      cuda::SetSidePoolFlash(flash);
      BenchDecodeAttention(gpu, 64, 8192, copy, KVQuant::kKivi2);
      BenchDecodeAttention(gpu, 64, 8192, copy, KVQuant::kInt4, 4, 16);
      if (flash) BenchDecodeAttention(gpu, 64, 8192, copy, KVQuant::kFp8E4M3, 4, 0);
    }
    cuda::SetSidePoolFlash(true);
    if (!quick) BenchDecodeAttention(gpu, 64, 32768, copy, KVQuant::kKivi2);
    if (!quick) {
      for (const KVQuant q : kFormats) BenchDecodeAttention(gpu, 64, 32768, copy, q);
    }
    if (decode_attention_only) return 0;
    BenchPrefillAttentions(gpu, quick);
    if (attention_only) return 0;
    BenchSampling(gpu, quick);
    if (!model.empty()) BenchModel(gpu, model, copy, quick, !eager, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagoda_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
