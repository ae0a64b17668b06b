#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace pagoda::testing {

std::string FixturesDir() {
  if (const char* env = std::getenv("PAGODA_FIXTURES"); env != nullptr && *env != '\0') return env;
  return std::string(PAGODA_SOURCE_DIR) + "/../shared/fixtures";
}

std::string Fixture(const std::string& relative) {
  std::string path = FixturesDir() + "/" + relative;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    ADD_FAILURE() << "fixture missing: " << path << " (set PAGODA_FIXTURES)";
  }
  return path;
}

std::vector<float> AllLogits(Model& model, const std::vector<int32_t>& ids, DType kv_dtype,
                             int64_t block_size, int64_t chunk, const ForwardObserver* observer,
                             KVStorage* cache_out) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t vocab = model.spec().vocab_size;
  const int64_t num_blocks = (n + block_size - 1) / block_size;
  KVStorage local(model.KVShapeFor(num_blocks, block_size, kv_dtype));
  KVStorage& cache = cache_out ? *cache_out : local;
  // A scrambled block table, so tests exercise real paging rather than contiguous slots.
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  std::vector<float> logits(n * vocab);
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t m = std::min(chunk, n - start);
    ForwardBatch b;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t pos = start + i;
      b.token_ids.push_back(ids[pos]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(int64_t{table[pos / block_size]} * block_size + pos % block_size);
      b.block_tables.push_back(table.data());
      b.logits_indices.push_back(static_cast<int32_t>(i));
    }
    model.Forward(b, cache, logits.data() + start * vocab, observer);
  }
  return logits;
}

}  // namespace pagoda::testing
