#include "core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace pagoda {
namespace {

// Restores the thread count a test changes.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(NumThreads()) { SetNumThreads(n); }
  ~ThreadCount() { SetNumThreads(saved_); }

 private:
  int saved_;
};

TEST(ParallelForDynamicTest, CallsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    const ThreadCount tc(threads);
    for (int64_t n : {0, 1, 2, 3, 5, 64, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      for (auto& s : seen) s = 0;
      ParallelForDynamic(n, [&](int64_t i) {
        ASSERT_GE(i, 0);
        ASSERT_LT(i, n);
        seen[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "threads " << threads << " n " << n << " item " << i;
    }
  }
}

// A thread stuck on the first item of its range: the other thread finishes its own range and
// then takes the stuck thread's remaining items from their end. Item 0 waits until one of
// items 1 .. n/2 - 1 (its own thread's range) has been run, which only the other thread can do.
TEST(ParallelForDynamicTest, AnIdleThreadTakesTheRemainingItemsOfABusyOne) {
  const ThreadCount tc(2);
  const int64_t n = 40;
  std::vector<std::atomic<int>> seen(n);
  for (auto& s : seen) s = 0;
  std::atomic<int> first_half_done{0};
  std::atomic<bool> timed_out{false};
  ParallelForDynamic(n, [&](int64_t i) {
    if (i == 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (first_half_done.load() == 0) {
        if (std::chrono::steady_clock::now() > give_up) {
          timed_out = true;
          break;
        }
        std::this_thread::yield();
      }
    } else if (i < n / 2) {
      first_half_done.fetch_add(1);
    }
    seen[i].fetch_add(1);
  });
  EXPECT_FALSE(timed_out.load()) << "no other thread took an item of the busy thread's range";
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

TEST(ParallelForDynamicTest, OwnRangeRunsInIncreasingOrder) {
  const ThreadCount tc(1);
  std::vector<int64_t> order;
  ParallelForDynamic(10, [&](int64_t i) { order.push_back(i); });
  ASSERT_EQ(order.size(), 10u);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace pagoda
