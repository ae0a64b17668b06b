#include "plan/planner.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_cache_config.h"
#include "model/presets.h"
#include "plan/advisor.h"
#include "plan/report.h"

namespace pagoda {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

PlanInputs Inputs(const std::string& model, const std::string& gpu, int64_t context,
                  int64_t concurrency) {
  PlanInputs in;
  in.model = GetPreset(model);
  in.gpu = GetGpuPreset(gpu);
  in.context = context;
  in.concurrency = concurrency;
  in.kv_dtype = KVCacheDType::kBF16;
  in.weights = ParseWeightFormat("auto", in.model.weight_dtype);
  return in;
}

// Hand-computed: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 131072 bytes per token;
// 128K tokens x 16 requests x 131072 = 2^17 x 2^4 x 2^17 = 2^38 bytes = 256 GiB.
TEST(PlannerTest, Llama3_8BBf16Is131072BytesPerTokenAnd256GiBAt128Kx16) {
  const PlanResult r = Plan(Inputs("llama-3-8b", "h200", 131072, 16));
  EXPECT_EQ(r.kv_bytes_per_token, 131072);
  EXPECT_EQ(r.kv_bytes_per_sequence, 16 * kGiB);
  EXPECT_EQ(r.kv_bytes_total, 256 * kGiB);
  EXPECT_FALSE(r.fits);  // 256 GiB of KV on one 140 GiB GPU
  EXPECT_EQ(r.bottleneck, "capacity");
}

// Hand-computed: 61 layers x (latent 512 + RoPE 64) x 2 bytes = 61 x 1152 = 70272.
TEST(PlannerTest, DeepseekV3Bf16Is70272BytesPerToken) {
  PlanInputs in = Inputs("deepseek-v3", "h200", 32768, 1);
  in.num_gpus = 8;
  const PlanResult r = Plan(in);
  EXPECT_EQ(r.kv_bytes_per_token, 70272);
  // MLA's latent is replicated: every GPU stores the whole thing.
  EXPECT_EQ(r.kv_bytes_per_token_per_gpu, 70272);
  // FP8 quantizes the latent (512 + f32 scale) but keeps k_pe in bf16: 61 x (516 + 128).
  in.kv_dtype = KVCacheDType::kFp8E4M3;
  EXPECT_EQ(Plan(in).kv_bytes_per_token, 61 * (516 + 128));
}

// The engine sizes its pool with NumKVBlocks(memory, block_size, KVBytesPerToken(shape,
// dtype, options)); for the same memory the planner must get the same count.
TEST(PlannerTest, NumBlocksForGivenMemoryIsTheEngines) {
  for (const char* model : {"llama-3-8b", "qwen2.5-7b", "deepseek-v2-lite", "llama-tiny"}) {
    for (KVCacheDType t : {KVCacheDType::kBF16, KVCacheDType::kFp8E4M3, KVCacheDType::kInt4,
                           KVCacheDType::kKivi2}) {
      for (int64_t block_size : {1, 16, 256}) {
        for (int64_t memory : {int64_t{0}, int64_t{123456789}, 40 * kGiB + 12345}) {
          PlanInputs in = Inputs(model, "h100", 4096, 1);
          in.kv_dtype = t;
          in.block_size = block_size;
          in.kv_cache_memory_bytes = memory;
          const ModelSpec spec = GetPreset(model);
          const int64_t engine =
              NumKVBlocks(memory, block_size, KVBytesPerToken(spec.kv_shape(), t, in.kv_options));
          EXPECT_EQ(Plan(in).num_blocks, engine) << model << " " << KVCacheDTypeName(t);
        }
      }
    }
  }
}

// The same through the engine's sizing entry point (kv/kv_cache_config.h), both with an
// explicit --kv-cache-memory and with --gpu-memory-utilization on a device.
TEST(PlannerTest, NumBlocksMatchesComputeKVCacheConfig) {
  for (const char* model : {"llama-3-8b", "deepseek-v3", "mistral-7b"}) {
    for (KVCacheDType t : {KVCacheDType::kBF16, KVCacheDType::kFp8E4M3, KVCacheDType::kNvfp4}) {
      PlanInputs in = Inputs(model, "h200", 8192, 4);
      if (std::string(model) == "deepseek-v3") {  // as published: fp8 weights on 8 GPUs
        in.num_gpus = 8;
        in.weights = ParseWeightFormat("fp8", DType::kBF16);
      }
      in.kv_dtype = t;
      const PlanResult derived = Plan(in);
      KVCacheSizingOptions o;
      o.shape = ShardKVShape(in.model.kv_shape(), in.num_gpus);
      o.dtype = t;
      o.block_size = in.block_size;
      o.max_model_len = 1;
      o.gpu_memory_utilization = in.gpu_memory_utilization;
      o.device_total_bytes = in.gpu.memory_bytes;
      o.non_kv_bytes = derived.weight_bytes_per_gpu + derived.activation_reserve_bytes;
      EXPECT_EQ(derived.num_blocks, ComputeKVCacheConfig(o).num_blocks) << model;
      in.kv_cache_memory_bytes = 7 * kGiB + 333;
      o.kv_cache_memory_bytes = in.kv_cache_memory_bytes;
      EXPECT_EQ(Plan(in).num_blocks, ComputeKVCacheConfig(o).num_blocks) << model;
    }
  }
}

TEST(PlannerTest, DerivedKvMemoryIsUsableMinusWeightsMinusReserve) {
  PlanInputs in = Inputs("llama-3-8b", "h200", 131072, 1);
  in.activation_reserve_bytes = 2 * kGiB;
  const PlanResult r = Plan(in);
  const int64_t usable = static_cast<int64_t>(static_cast<double>(in.gpu.memory_bytes) * 0.9);
  EXPECT_EQ(r.usable_bytes_per_gpu, usable);
  EXPECT_EQ(r.weight_bytes, GetPreset("llama-3-8b").NumParameters() * 2);
  EXPECT_EQ(r.kv_memory_per_gpu, usable - r.weight_bytes - 2 * kGiB);
  EXPECT_EQ(r.num_blocks, NumKVBlocks(r.kv_memory_per_gpu, 16, 131072));
  EXPECT_EQ(r.max_concurrency, r.num_blocks / (131072 / 16));
  EXPECT_TRUE(r.fits);
}

TEST(PlannerTest, TensorParallelShardsWeightsAndKvHeadsNotTheMlaLatent) {
  PlanInputs in = Inputs("llama-3-70b", "h100", 8192, 4);
  in.num_gpus = 4;
  const PlanResult r = Plan(in);
  EXPECT_EQ(r.kv_bytes_per_token, 80 * 8 * 128 * 2 * 2);
  EXPECT_EQ(r.kv_bytes_per_token_per_gpu, r.kv_bytes_per_token / 4);
  EXPECT_EQ(r.weight_bytes_per_gpu, (r.weight_bytes + 3) / 4);
  // More GPUs than KV heads: replicated, one head per GPU.
  KVShape s{32, 8, 128, 128, 0, false};
  EXPECT_EQ(ShardKVShape(s, 16).num_kv_heads, 1);
  EXPECT_THROW(ShardKVShape({32, 6, 128, 128, 0, false}, 4), Error);
  KVShape mla{61, 1, 512, 0, 64, true};
  EXPECT_EQ(ShardKVShape(mla, 8).num_kv_heads, 1);
}

TEST(PlannerTest, PrefixSharingStoresSharedFullBlocksOnce) {
  PlanInputs in = Inputs("llama-3-8b", "h100", 4096, 10);
  in.input_len = 3000;
  in.prefix_share = 0.5;  // 1500 shared tokens = 93 full blocks of 16
  const PlanResult r = Plan(in);
  EXPECT_EQ(r.shared_prefix_blocks, 93);
  EXPECT_EQ(r.blocks_per_sequence, 256);
  EXPECT_EQ(r.blocks_needed, 93 + 10 * (256 - 93));
  EXPECT_DOUBLE_EQ(r.prefix_memory_saved_bytes, 9.0 * 93 * 16 * 131072);
  EXPECT_TRUE(Advise(in, r).recommended.enable_prefix_caching);
}

TEST(PlannerTest, DecodeRooflineIsMemoryBoundAtBatchOne) {
  const PlanResult r = Plan(Inputs("llama-3-8b", "h100", 4096, 1));
  EXPECT_EQ(r.bottleneck, "memory_bandwidth");
  EXPECT_GT(r.decode.memory_bound_s, r.decode.compute_bound_s);
  // Reads about the active weights (bf16) + one sequence of KV per step.
  const double expected = (static_cast<double>(GetPreset("llama-3-8b").NumActiveParameters()) * 2 +
                           4096.0 * 131072) / 3.35e12;
  EXPECT_NEAR(r.decode.memory_bound_s, expected, expected * 1e-9);
}

TEST(PlannerTest, MoeBatchTouchesMoreExperts) {
  PlanInputs in = Inputs("deepseek-v3", "h200", 4096, 1);
  in.num_gpus = 8;
  in.weights = ParseWeightFormat("fp8", DType::kBF16);
  const double one = Plan(in).decode.weight_bytes_read;
  in.concurrency = 256;
  const double many = Plan(in).decode.weight_bytes_read;
  EXPECT_GT(many, 5 * one);
  EXPECT_LT(many, static_cast<double>(GetPreset("deepseek-v3").NumParameters()) / 8 * 1.0001);
}

TEST(PlannerTest, AdvisorFallsBackToFp8WhenBf16DoesNotFit) {
  PlanInputs in = Inputs("llama-3-8b", "h200", 131072, 8);  // 128 GiB of bf16 KV
  const PlanResult r = Plan(in);
  EXPECT_FALSE(r.fits);
  const Advice a = Advise(in, r);
  EXPECT_TRUE(a.recommended.fits);
  EXPECT_EQ(a.recommended.kv_cache_dtype, KVCacheDType::kFp8E4M3);
  EXPECT_EQ(a.recommended.max_model_len, 131072);
  EXPECT_EQ(a.recommended.min_num_gpus, 1);
  EXPECT_FALSE(a.notes.empty());
  // 16 x 128K needs 132 GiB even in fp8: not on one H200; two GPUs, or a shorter context.
  in.concurrency = 16;
  const Advice b = Advise(in, Plan(in));
  EXPECT_FALSE(b.recommended.fits);
  EXPECT_EQ(b.recommended.kv_cache_dtype, KVCacheDType::kFp8E4M3);
  EXPECT_EQ(b.recommended.min_num_gpus, 2);
  EXPECT_LT(b.recommended.max_model_len, 131072);
}

TEST(PlannerTest, JsonHasTheIssueKeys) {
  PlanInputs in = Inputs("deepseek-v3", "h200", 131072, 16);
  in.num_gpus = 8;
  const PlanResult r = Plan(in);
  const nlohmann::json j = PlanToJson(in, r, Advise(in, r));
  for (const char* key : {"weight_bytes", "kv_bytes_per_token", "kv_bytes_per_sequence",
                          "kv_bytes_total", "fits", "max_concurrency", "max_model_len",
                          "num_blocks", "decode_step_seconds", "bottleneck", "recommended"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j["decode_step_seconds"].contains("memory_bound"));
  EXPECT_TRUE(j["decode_step_seconds"].contains("compute_bound"));
  for (const char* key : {"gpu_memory_utilization", "max_model_len", "enable_prefix_caching",
                          "kv_cache_dtype"}) {
    EXPECT_TRUE(j["recommended"].contains(key)) << key;
  }
  EXPECT_EQ(j["kv_bytes_per_token"], 70272);
}

TEST(PlannerTest, CompareCoversVariantsDtypesContextsAndBatches) {
  PlanInputs in = Inputs("llama-3-8b", "h200", 4096, 1);
  const nlohmann::json j = CompareToJson(in);
  EXPECT_EQ(j["rows"].size(), 3u * 3u * 2u * 2u);
  // MHA = 32 heads, GQA = the model's 8, MLA = 512 + 64 per layer.
  EXPECT_EQ(j["rows"][0]["kv_bytes_per_token"], 32 * 32 * 128 * 2 * 2);
  EXPECT_EQ(j["rows"][12]["kv_bytes_per_token"], 131072);
  EXPECT_EQ(j["rows"][24]["kv_bytes_per_token"], 32 * 576 * 2);
}

TEST(PlannerTest, BadInputsNameTheFlag) {
  PlanInputs in = Inputs("llama-3-8b", "h100", 4096, 1);
  in.num_gpus = 3;
  EXPECT_THROW(Plan(in), Error);
  in.num_gpus = 1;
  in.prefix_share = 1.5;
  try {
    Plan(in);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--prefix-share"), std::string::npos);
  }
  EXPECT_THROW(GetGpuPreset("v100"), Error);
  EXPECT_THROW(ParseWeightFormat("int3", DType::kBF16), Error);
}

}  // namespace
}  // namespace pagoda
