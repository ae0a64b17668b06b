#include "engine/decode_padding.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

std::vector<int64_t> ParseDecodeBatchSizes(const std::string& spec, int64_t max_num_seqs) {
  PAGODA_ENSURE(max_num_seqs >= 1, ErrorCode::kInvalidArgument, "--max-num-seqs must be at least 1");
  std::vector<int64_t> sizes;
  if (spec.empty() || spec == "none") return sizes;
  if (spec == "auto") {
    for (int64_t b : {1, 2, 4}) sizes.push_back(b);
    for (int64_t b = 8; b < max_num_seqs; b += 8) sizes.push_back(b);
  } else {
    size_t i = 0;
    while (i <= spec.size()) {
      const size_t j = std::min(spec.find(',', i), spec.size());
      const std::string item = spec.substr(i, j - i);
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      PAGODA_ENSURE(!item.empty() && used == item.size() && v >= 1, ErrorCode::kInvalidArgument,
                    "--cuda-graph-sizes: '" << item << "' is not a positive batch size (expected none, auto or e.g. 1,2,4,8)");
      sizes.push_back(v);
      i = j + 1;
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int64_t b) { return b > max_num_seqs; }), sizes.end());
  if (sizes.empty() || sizes.back() < max_num_seqs) sizes.push_back(max_num_seqs);
  return sizes;
}

int64_t PaddedDecodeBatch(int64_t n, const std::vector<int64_t>& sizes) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? n : *it;
}

}  // namespace pagoda
