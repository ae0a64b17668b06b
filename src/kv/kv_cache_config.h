// Sizing the KV cache: how many blocks, from which memory budget, and the start-up line
//   KV cache: 2048 blocks x 16 tokens = 32768 tokens (64.0 MiB, bf16); max concurrency at max_model_len 4096: 8.00x
//
// The budget, first match wins (less, for 2 and 3, the side pool of --max-num-seqs live
// sequences when kivi2, --kv-sink-tokens or --kv-recent-tokens need one; printed after the line):
//   1. --kv-cache-memory SIZE                 exactly that many bytes;
//   2. --gpu-memory-utilization F, on a device that reports its total memory:
//        F x device_total - non_kv_bytes      (this process's weights + peak activations +
//                                              KV within F of the device, as vLLM does: a
//                                              per-instance limit, so several servers can
//                                              share a GPU); F x device_total must have been
//                                              free when the process started;
//   3. on the CPU: kDefaultCpuKVFraction x (MemAvailable - non_kv_bytes), MemAvailable read
//        from /proc/meminfo at start-up, capped at max_kv_tokens when that is set.
// Bytes per token come from KVBytesPerToken (kv_layout.h), the one formula the planner and
// the metrics use too; blocks from NumKVBlocks.
// Failure: a bad size string, a bad block size, or a cache that cannot hold one sequence of
// max_model_len tokens throws pagoda::Error naming the numbers and the flag to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/kv_layout.h"

namespace pagoda {

// A device's default --gpu-memory-utilization (vLLM's).
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;

// The CPU default: half the RAM that is available once the weights are accounted for.
inline constexpr double kDefaultCpuKVFraction = 0.5;

// "512MiB", "2GiB", "1.5GB", "4096" (bytes), "64K". Binary units: KiB MiB GiB TiB and the
// single letters K M G T; decimal units: KB MB GB TB; B or nothing for bytes. Units are
// case-insensitive, a space before the unit is allowed, fractions are rounded down to a
// byte. Throws InvalidArgument (naming `flag`) for anything else or a size <= 0.
int64_t ParseMemorySize(std::string_view text, std::string_view flag = "--kv-cache-memory");

// MemAvailable from a /proc/meminfo-format file, in bytes (ReadMeminfoBytes, core/memory_info.h).
// Throws NotFound if the file or the field is missing, naming --kv-cache-memory as the way out.
int64_t ReadMemAvailableBytes(const std::string& meminfo_path = "/proc/meminfo");

struct KVCacheSizingOptions {
  KVShape shape;
  KVCacheDType dtype = KVCacheDType::kBF16;
  KVQuantOptions quant;
  int64_t block_size = 16;      // --block-size
  int64_t max_model_len = 0;    // --max-model-len
  std::optional<int64_t> kv_cache_memory_bytes;   // --kv-cache-memory (parsed)
  std::optional<double> gpu_memory_utilization;   // --gpu-memory-utilization
  int64_t device_total_bytes = 0;  // a GPU's total memory; 0 on the CPU
  int64_t non_kv_bytes = 0;        // weights + peak activations, outside the KV budget
  int64_t device_free_bytes = -1;  // a GPU's free memory when the process started; -1: unknown
  int64_t cpu_available_bytes = -1;  // CPU: MemAvailable; -1 reads /proc/meminfo
  int64_t max_kv_tokens = 0;         // CPU default only: no more tokens than this (0: no cap)
  int64_t kv_copies = 1;             // copies of the shape's bytes per token stored (Model::KVCopies)
  int64_t max_num_seqs = 0;          // --max-num-seqs: the side pool's reservation (0: none)
};

struct KVCacheConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t bytes_per_token = 0;
  int64_t max_model_len = 0;
  KVCacheDType dtype = KVCacheDType::kBF16;
  // The side pool's bytes for max_num_seqs live sequences (KVSidePoolBytesPerSequence), kept
  // out of a --gpu-memory-utilization or CPU-default budget; 0 when no policy needs the pool.
  int64_t side_pool_bytes = 0;
  int64_t side_pool_sequences = 0;

  int64_t num_tokens() const { return num_blocks * block_size; }
  int64_t memory_bytes() const { return num_tokens() * bytes_per_token; }
  // Sequences of max_model_len tokens that fit at once: num_tokens / max_model_len.
  double max_concurrency() const;
};

// Throws pagoda::Error (see the top of this file).
KVCacheConfig ComputeKVCacheConfig(const KVCacheSizingOptions& options);

// The start-up line, exactly:
//   "KV cache: 2048 blocks x 16 tokens = 32768 tokens (64.0 MiB, bf16); max concurrency at
//    max_model_len 4096: 8.00x"   (one line)
std::string FormatKVCacheConfig(const KVCacheConfig& config);

}  // namespace pagoda
