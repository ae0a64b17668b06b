#include "parallel/communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace pagoda {
namespace {

// Runs fn(rank) on one thread per rank.
template <typename F>
void OnEveryRank(int size, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(LocalGroupTest, AllReduceSumsInRankOrderWithTheSameBitsOnEveryRank) {
  for (int size : {1, 2, 3, 4}) {
    for (int64_t n : {1, 7, 1000}) {
      LocalGroup group(size);
      std::vector<std::vector<float>> data(size);
      std::mt19937 rng(size * 100 + static_cast<uint32_t>(n));
      std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
      for (auto& d : data) {
        d.resize(n);
        for (float& x : d) x = dist(rng);
      }
      std::vector<float> want(n);
      for (int64_t i = 0; i < n; ++i) {
        float v = data[0][i];
        for (int r = 1; r < size; ++r) v += data[r][i];
        want[i] = v;
      }
      // Twice in a row: the shared state is reusable.
      auto expected = want;
      OnEveryRank(size, [&](int r) {
        group.rank(r).AllReduceSum(data[r].data(), n);
      });
      for (int r = 0; r < size; ++r) {
        EXPECT_EQ(std::memcmp(data[r].data(), expected.data(), n * sizeof(float)), 0) << "size " << size << " rank " << r;
      }
      OnEveryRank(size, [&](int r) { group.rank(r).AllReduceSum(data[r].data(), n); });
      for (int64_t i = 0; i < n; ++i) {
        float v = expected[i];
        for (int r = 1; r < size; ++r) v += expected[i];
        EXPECT_EQ(data[size - 1][i], v);
      }
    }
  }
}

TEST(LocalGroupTest, DifferentSizesThrowOnEveryRankInsteadOfHanging) {
  LocalGroup group(2);
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  int thrown = 0;
  std::mutex m;
  OnEveryRank(2, [&](int r) {
    try {
      group.rank(r).AllReduceSum(r == 0 ? a.data() : b.data(), r == 0 ? 4 : 5);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different sizes"), std::string::npos);
      std::lock_guard<std::mutex> lock(m);
      ++thrown;
    }
  });
  EXPECT_EQ(thrown, 2);
  EXPECT_THROW(LocalGroup(0), Error);
}

}  // namespace
}  // namespace pagoda
