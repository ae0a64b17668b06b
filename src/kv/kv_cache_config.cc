#include "kv/kv_cache_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/memory_info.h"

namespace pagoda {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string MiB(int64_t bytes) { return FormatBytes(bytes); }

bool IsPowerOfTwoBlockSize(int64_t b) { return b >= 1 && b <= 256 && (b & (b - 1)) == 0; }

}  // namespace

int64_t ParseMemorySize(std::string_view text, std::string_view flag) {
  auto fail = [&](const std::string& why) -> int64_t {
    ThrowInvalidArgument(std::string(flag) + ": '" + std::string(text) + "' " + why +
                         " (expected e.g. 512MiB, 2GiB, 1.5GB or a number of bytes)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t num_begin = i;
  bool seen_digit = false, seen_dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      seen_digit = true;
    } else if (c == '.' && !seen_dot) {
      seen_dot = true;
    } else {
      break;
    }
  }
  if (!seen_digit) return fail("is not a size");
  const double value = std::strtod(std::string(text.substr(num_begin, i - num_begin)).c_str(),
                                   nullptr);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t end = text.size();
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string unit = Lower(text.substr(i, end - i));
  double scale;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return fail("has an unknown unit '" + std::string(text.substr(i, end - i)) + "'");
  }
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 1)) return fail("must be at least one byte");
  if (bytes >= 9.2e18) return fail("is too large");
  return static_cast<int64_t>(bytes);
}

int64_t ReadMemAvailableBytes(const std::string& meminfo_path) {
  try {
    return ReadMeminfoBytes("MemAvailable", meminfo_path);
  } catch (const Error& e) {
    ThrowError(e.code(), std::string(e.what()) +
                             " (needed to size the KV cache; pass --kv-cache-memory SIZE)");
  }
}

double KVCacheConfig::max_concurrency() const {
  return max_model_len > 0 ? static_cast<double>(num_tokens()) / max_model_len : 0.0;
}

KVCacheConfig ComputeKVCacheConfig(const KVCacheSizingOptions& o) {
  if (!IsPowerOfTwoBlockSize(o.block_size)) {
    ThrowInvalidArgument("--block-size: " + std::to_string(o.block_size) +
                         " is not a power of two from 1 to 256");
  }
  PAGODA_ENSURE(o.max_model_len >= 1, ErrorCode::kInvalidArgument,
                "--max-model-len: " << o.max_model_len << " must be at least 1");
  KVCacheConfig c;
  c.block_size = o.block_size;
  c.max_model_len = o.max_model_len;
  c.dtype = o.dtype;
  PAGODA_ENSURE(o.kv_copies >= 1, ErrorCode::kInvalidArgument, "kv_copies " << o.kv_copies << " must be at least 1");
  c.bytes_per_token = KVBytesPerToken(o.shape, o.dtype, o.quant) * o.kv_copies;
  PAGODA_ENSURE(c.bytes_per_token > 0, ErrorCode::kInvalidArgument,
                "the model caches 0 bytes per token (num_layers " << o.shape.num_layers
                                                                  << ", num_kv_heads "
                                                                  << o.shape.num_kv_heads << ")");

  c.side_pool_sequences = o.max_num_seqs;
  c.side_pool_bytes = std::max<int64_t>(o.max_num_seqs, 0) * KVSidePoolBytesPerSequence(o.shape, o.dtype, o.quant) *
                      o.kv_copies;
  int64_t budget = 0;
  std::string source;
  if (o.kv_cache_memory_bytes) {
    budget = *o.kv_cache_memory_bytes;
    source = "--kv-cache-memory " + MiB(budget);
  } else if (o.gpu_memory_utilization && o.device_total_bytes > 0) {
    const double f = *o.gpu_memory_utilization;
    PAGODA_ENSURE(f > 0.0 && f <= 1.0, ErrorCode::kInvalidArgument,
                  "--gpu-memory-utilization: " << f << " must be in (0, 1]");
    const int64_t limit = static_cast<int64_t>(f * static_cast<double>(o.device_total_bytes));
    PAGODA_ENSURE(o.device_free_bytes < 0 || limit <= o.device_free_bytes, ErrorCode::kResourceExhausted,
                  "--gpu-memory-utilization " << f << " asks for " << MiB(limit) << " of the "
                  << MiB(o.device_total_bytes) << " device, but only " << MiB(o.device_free_bytes)
                  << " were free when pagoda started (other processes hold the rest): lower "
                  << "--gpu-memory-utilization to at most "
                  << static_cast<double>(o.device_free_bytes) / static_cast<double>(o.device_total_bytes));
    budget = limit - o.non_kv_bytes - c.side_pool_bytes;
    PAGODA_ENSURE(budget > 0, ErrorCode::kResourceExhausted,
                  "--gpu-memory-utilization " << f << " allows " << MiB(limit) << " of the "
                  << MiB(o.device_total_bytes) << " device, but weights and activations "
                  << "already take " << MiB(o.non_kv_bytes)
                  << (c.side_pool_bytes > 0 ? " and the side pool of " + std::to_string(o.max_num_seqs) +
                                                  " sequences " + MiB(c.side_pool_bytes)
                                            : std::string())
                  << ": raise --gpu-memory-utilization or use a smaller model or dtype");
    source = "--gpu-memory-utilization " + std::to_string(f);
  } else {
    const int64_t avail =
        o.cpu_available_bytes >= 0 ? o.cpu_available_bytes : ReadMemAvailableBytes();
    budget = static_cast<int64_t>(kDefaultCpuKVFraction *
                                  static_cast<double>(std::max<int64_t>(0, avail - o.non_kv_bytes))) -
             c.side_pool_bytes;
    if (o.max_kv_tokens > 0) {
      const int64_t cap_blocks = (o.max_kv_tokens + o.block_size - 1) / o.block_size;
      budget = std::min(budget, cap_blocks * o.block_size * c.bytes_per_token);
    }
    source = "the CPU default (" + std::to_string(static_cast<int>(kDefaultCpuKVFraction * 100)) +
             "% of " + MiB(avail) + " available RAM)";
  }
  c.num_blocks = NumKVBlocks(budget, o.block_size, c.bytes_per_token);
  if (c.num_tokens() < o.max_model_len) {
    const int64_t need = (o.max_model_len + o.block_size - 1) / o.block_size * o.block_size *
                         c.bytes_per_token;
    (ErrorBuilder(ErrorCode::kResourceExhausted)
        << "the KV cache from " << source << " holds " << c.num_tokens() << " tokens ("
        << c.num_blocks << " blocks x " << o.block_size << ", " << c.bytes_per_token
        << " bytes per token in " << KVCacheDTypeName(o.dtype)
        << "), fewer than --max-model-len " << o.max_model_len
        << ": lower --max-model-len to at most " << c.num_tokens()
        << ", or give the cache at least " << MiB(need)
        << " (--kv-cache-memory, --gpu-memory-utilization), or use a smaller --kv-cache-dtype")
        .Raise();
  }
  return c;
}

std::string FormatKVCacheConfig(const KVCacheConfig& c) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "KV cache: %lld blocks x %lld tokens = %lld tokens (%s, %s); max concurrency at "
                "max_model_len %lld: %.2fx",
                static_cast<long long>(c.num_blocks), static_cast<long long>(c.block_size),
                static_cast<long long>(c.num_tokens()), FormatBytes(c.memory_bytes()).c_str(),
                std::string(KVCacheDTypeName(c.dtype)).c_str(),
                static_cast<long long>(c.max_model_len), c.max_concurrency());
  std::string line = buf;
  if (c.side_pool_bytes > 0) {
    line += "; side pool (bf16 blocks) " + FormatBytes(c.side_pool_bytes) + " for " +
            std::to_string(c.side_pool_sequences) + " sequences";
  }
  return line;
}

}  // namespace pagoda
