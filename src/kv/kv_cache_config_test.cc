#include "kv/kv_cache_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "kv/kv_layout.h"

namespace pagoda {
namespace {

TEST(ParseMemorySizeTest, AcceptsBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(ParseMemorySize("512MiB"), 512LL << 20);
  EXPECT_EQ(ParseMemorySize("2GiB"), 2LL << 30);
  EXPECT_EQ(ParseMemorySize("1.5GB"), 1500000000LL);
  EXPECT_EQ(ParseMemorySize("1.5GiB"), 3LL << 29);
  EXPECT_EQ(ParseMemorySize("4096"), 4096);
  EXPECT_EQ(ParseMemorySize("64K"), 64LL << 10);
  EXPECT_EQ(ParseMemorySize("8 gib"), 8LL << 30);
  EXPECT_EQ(ParseMemorySize("100B"), 100);
  EXPECT_EQ(ParseMemorySize("1TB"), 1000000000000LL);
}

TEST(ParseMemorySizeTest, RejectsBadStringsWithAClearMessage) {
  for (const char* bad : {"", "abc", "12XB", "-5MiB", "0", "MiB", "1.2.3GB", "0.1"}) {
    try {
      ParseMemorySize(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--kv-cache-memory"), std::string::npos) << e.what();
    }
  }
}

TEST(ReadMemAvailableTest, ParsesMeminfo) {
  const std::string path = ::testing::TempDir() + "/meminfo";
  std::ofstream(path) << "MemTotal:       16000000 kB\nMemFree:  100 kB\n"
                         "MemAvailable:    8000000 kB\n";
  EXPECT_EQ(ReadMemAvailableBytes(path), 8000000LL * 1024);
  std::ofstream(path) << "MemTotal: 5 kB\n";
  EXPECT_THROW(ReadMemAvailableBytes(path), Error);
  EXPECT_THROW(ReadMemAvailableBytes(path + ".missing"), Error);
  try {
    ReadMemAvailableBytes(path + ".missing");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("--kv-cache-memory"), std::string::npos) << e.what();
  }
  EXPECT_GT(ReadMemAvailableBytes(), 0);  // the real /proc/meminfo
}

// llama-tiny: 4 layers, 2 KV heads of 64: bf16 = 4 * 2 * (64 + 64) * 2 = 2048 bytes/token.
KVCacheSizingOptions Tiny() {
  KVCacheSizingOptions o;
  o.shape = {.num_layers = 4, .num_kv_heads = 2, .head_dim_k = 64, .head_dim_v = 64};
  o.dtype = KVCacheDType::kBF16;
  o.block_size = 16;
  o.max_model_len = 4096;
  return o;
}

TEST(KVCacheConfigTest, FormatsTheStartUpLineExactly) {
  KVCacheSizingOptions o = Tiny();
  o.kv_cache_memory_bytes = ParseMemorySize("64MiB");
  const KVCacheConfig c = ComputeKVCacheConfig(o);
  EXPECT_EQ(c.bytes_per_token, 2048);
  EXPECT_EQ(c.num_blocks, 2048);
  EXPECT_EQ(FormatKVCacheConfig(c),
            "KV cache: 2048 blocks x 16 tokens = 32768 tokens (64.0 MiB, bf16); "
            "max concurrency at max_model_len 4096: 8.00x");
  o.dtype = KVCacheDType::kFp8E4M3;
  o.kv_cache_memory_bytes = ParseMemorySize("2GiB");
  EXPECT_EQ(FormatKVCacheConfig(ComputeKVCacheConfig(o)),
            "KV cache: 123361 blocks x 16 tokens = 1973776 tokens (2.00 GiB, fp8_e4m3); "
            "max concurrency at max_model_len 4096: 481.88x");  // 1088 bytes per token
}

TEST(KVCacheConfigTest, GpuMemoryUtilizationLeavesRoomForWeights) {
  KVCacheSizingOptions o = Tiny();
  o.gpu_memory_utilization = 0.5;
  o.device_total_bytes = 1LL << 30;
  o.non_kv_bytes = 256LL << 20;  // 512 MiB allowed - 256 MiB of weights = 256 MiB of KV
  const KVCacheConfig c = ComputeKVCacheConfig(o);
  EXPECT_EQ(c.memory_bytes(), 256LL << 20);
  o.non_kv_bytes = 600LL << 20;
  EXPECT_THROW(ComputeKVCacheConfig(o), Error);
}

// kivi2's residual and sink / recent tokens keep bf16 block copies beside the cache, a tail
// block and the sink blocks a live sequence: --max-num-seqs of them come out of a
// --gpu-memory-utilization budget (not out of an explicit --kv-cache-memory), and the start-up
// line says so.
TEST(KVCacheConfigTest, TheSidePoolOfLiveSequencesComesOutOfTheBudget) {
  const KVShape tiny = Tiny().shape;
  // A bf16 block of one layer: 16 tokens x 2 heads x (64 + 64) x 2 bytes = 8 KiB; 4 layers.
  KVQuantOptions kivi2;
  EXPECT_EQ(KVSidePoolBytesPerSequence(tiny, KVCacheDType::kKivi2, kivi2), 4 * 8192);
  KVQuantOptions sink_recent;
  sink_recent.sink_tokens = 20;  // two blocks hold positions < 20
  sink_recent.recent_tokens = 4;
  sink_recent.skip_layers = {0};  // a bf16 layer keeps no copies
  EXPECT_EQ(KVSidePoolBytesPerSequence(tiny, KVCacheDType::kInt4, sink_recent), 3 * 3 * 8192);
  EXPECT_EQ(KVSidePoolBytesPerSequence(tiny, KVCacheDType::kInt4), 0);
  EXPECT_EQ(KVSidePoolBytesPerSequence(tiny, KVCacheDType::kBF16, sink_recent), 0);

  KVCacheSizingOptions o = Tiny();
  o.dtype = KVCacheDType::kKivi2;
  o.gpu_memory_utilization = 0.5;
  o.device_total_bytes = 1LL << 30;
  o.non_kv_bytes = 256LL << 20;
  const int64_t without = ComputeKVCacheConfig(o).memory_bytes();
  o.max_num_seqs = 64;
  const KVCacheConfig c = ComputeKVCacheConfig(o);
  EXPECT_EQ(c.side_pool_bytes, 64 * 4 * 8192);
  EXPECT_LE(c.memory_bytes(), (256LL << 20) - c.side_pool_bytes);
  EXPECT_LT(c.memory_bytes(), without);
  EXPECT_NE(FormatKVCacheConfig(c).find("; side pool (bf16 blocks) 2.0 MiB for 64 sequences"), std::string::npos)
      << FormatKVCacheConfig(c);
  o.gpu_memory_utilization.reset();
  o.kv_cache_memory_bytes = 64LL << 20;  // exactly this much cache; the pool is extra
  EXPECT_GT(ComputeKVCacheConfig(o).memory_bytes(), (64LL << 20) - (1LL << 20));
  o.dtype = KVCacheDType::kFp8E4M3;
  EXPECT_EQ(FormatKVCacheConfig(ComputeKVCacheConfig(o)).find("side pool"), std::string::npos);
}

// The fraction is this process's limit (vLLM's per-instance meaning): what other processes
// hold does not count against it, but the fraction must have been free at start-up.
TEST(KVCacheConfigTest, GpuMemoryUtilizationMustHaveBeenFreeAtStartUp) {
  KVCacheSizingOptions o = Tiny();
  o.gpu_memory_utilization = 0.25;
  o.device_total_bytes = 1LL << 30;
  o.non_kv_bytes = 64LL << 20;
  o.device_free_bytes = 300LL << 20;  // another process holds the rest
  EXPECT_EQ(ComputeKVCacheConfig(o).memory_bytes(), 192LL << 20);
  o.device_free_bytes = 200LL << 20;
  try {
    ComputeKVCacheConfig(o);
    ADD_FAILURE() << "a fraction larger than the free memory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("were free when pagoda started"), std::string::npos) << e.what();
  }
}

// Tensor parallelism storing two copies of the shape's bytes (replicated KV heads, MLA's latent
// on every rank): the same budget holds half the tokens, and the line reports the true bytes.
TEST(KVCacheConfigTest, KVCopiesMultiplyTheBytesPerToken) {
  KVCacheSizingOptions o = Tiny();
  o.kv_cache_memory_bytes = 64LL << 20;
  const KVCacheConfig one = ComputeKVCacheConfig(o);
  o.kv_copies = 2;
  const KVCacheConfig two = ComputeKVCacheConfig(o);
  EXPECT_EQ(two.bytes_per_token, 2 * one.bytes_per_token);
  EXPECT_EQ(two.num_blocks * 2, one.num_blocks);
  EXPECT_LE(two.memory_bytes(), 64LL << 20);
  o.kv_copies = 0;
  EXPECT_THROW(ComputeKVCacheConfig(o), Error);
}

TEST(KVCacheConfigTest, CpuDefaultIsHalfTheAvailableRam) {
  KVCacheSizingOptions o = Tiny();
  o.cpu_available_bytes = (256LL << 20) + (64LL << 20);
  o.non_kv_bytes = 64LL << 20;  // weights: 0.5 * (320 - 64) MiB = 128 MiB
  EXPECT_EQ(ComputeKVCacheConfig(o).memory_bytes(), 128LL << 20);
  o.max_kv_tokens = 5000;  // capped, rounded up to whole blocks
  EXPECT_EQ(ComputeKVCacheConfig(o).num_tokens(), 5008);
}

TEST(KVCacheConfigTest, TooSmallForOneSequenceNamesBothNumbersAndTheFix) {
  KVCacheSizingOptions o = Tiny();
  o.kv_cache_memory_bytes = 4LL << 20;  // 2048 tokens < 4096
  try {
    ComputeKVCacheConfig(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2048 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("--max-model-len 4096"), std::string::npos) << m;
    EXPECT_NE(m.find("lower --max-model-len to at most 2048"), std::string::npos) << m;
    EXPECT_NE(m.find("8.0 MiB"), std::string::npos) << m;
  }
}

TEST(KVCacheConfigTest, RejectsBadBlockSizes) {
  KVCacheSizingOptions o = Tiny();
  o.kv_cache_memory_bytes = 64LL << 20;
  for (int64_t bs : {0, 3, 12, 512}) {
    o.block_size = bs;
    EXPECT_THROW(ComputeKVCacheConfig(o), Error) << bs;
  }
}

}  // namespace
}  // namespace pagoda
