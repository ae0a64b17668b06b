#include "kv/free_block_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace pagoda {
namespace {


TEST(FreeBlockQueueTest, StartsWithAllBlocksInIdOrder) {
  FreeBlockQueue q(4);
  EXPECT_EQ(q.num_free_blocks(), 4);
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(FreeBlockQueueTest, PopFrontAppendPrependRemove) {
  FreeBlockQueue q(5);
  EXPECT_EQ(*q.PopFront(), 0);
  EXPECT_EQ(*q.PopFront(), 1);
  EXPECT_FALSE(q.Contains(0));
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{2, 3, 4}));
  q.Append(0);
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{2, 3, 4, 0}));
  q.Prepend(1);
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{1, 2, 3, 4, 0}));
  q.Remove(3);  // revive from the middle
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{1, 2, 4, 0}));
  q.Remove(0);  // the back
  q.Remove(1);  // the front
  EXPECT_EQ(q.ToVector(), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(q.num_free_blocks(), 2);
}

TEST(FreeBlockQueueTest, EmptyQueuePopsNothing) {
  FreeBlockQueue q(1);
  EXPECT_EQ(*q.PopFront(), 0);
  EXPECT_FALSE(q.PopFront().has_value());
  FreeBlockQueue empty(0);
  EXPECT_FALSE(empty.PopFront().has_value());
}

TEST(FreeBlockQueueDeathTest, DoubleAppendAborts) {
  FreeBlockQueue q(2);
  EXPECT_DEATH(q.Append(1), "already free");
  EXPECT_DEATH(({ q.Remove(0); q.Remove(0); }), "not in the free queue");
}

TEST(FreeBlockQueueTest, MatchesDequeModelUnderRandomOps) {
  std::mt19937 rng(7);
  const int32_t n = 64;
  FreeBlockQueue q(n);
  std::deque<int32_t> model;
  for (int32_t i = 0; i < n; ++i) model.push_back(i);
  std::vector<int32_t> taken;
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 4;
    if (op == 0 && !model.empty()) {
      EXPECT_EQ(*q.PopFront(), model.front());
      taken.push_back(model.front());
      model.pop_front();
    } else if ((op == 1 || op == 2) && !taken.empty()) {
      const size_t k = rng() % taken.size();
      const int32_t b = taken[k];
      taken.erase(taken.begin() + k);
      if (op == 1) {
        q.Append(b);
        model.push_back(b);
      } else {
        q.Prepend(b);
        model.push_front(b);
      }
    } else if (op == 3 && !model.empty()) {
      const size_t k = rng() % model.size();
      q.Remove(model[k]);
      taken.push_back(model[k]);
      model.erase(model.begin() + k);
    }
    ASSERT_EQ(q.num_free_blocks(), static_cast<int32_t>(model.size()));
  }
  EXPECT_EQ(q.ToVector(), std::vector<int32_t>(model.begin(), model.end()));
}

}  // namespace
}  // namespace pagoda
