#include "kv/contiguous_allocator.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(ContiguousAllocatorTest, ReservesMaxModelLenPerRequest) {
  ContiguousAllocator a(/*num_slots=*/10, /*max_model_len=*/4);
  EXPECT_EQ(a.max_num_requests(), 2);  // 2 slots of the 10 can never be used
  EXPECT_TRUE(a.Admit(7));
  EXPECT_TRUE(a.AllocateSlots(7, 3));
  EXPECT_EQ(a.num_reserved_tokens(), 4);
  EXPECT_EQ(a.num_used_tokens(), 3);
  EXPECT_DOUBLE_EQ(a.Waste(), 0.25);
  EXPECT_TRUE(a.Admit(8));
  EXPECT_FALSE(a.Admit(9));  // no region left, whatever the lengths
  EXPECT_DOUBLE_EQ(a.Usage(), 1.0);
  std::vector<int64_t> slots;
  a.AppendSlotMapping(7, 1, 2, &slots);
  a.AppendSlotMapping(8, 0, 1, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{1, 2, 4}));
}

TEST(ContiguousAllocatorTest, RefusesToGrowPastMaxModelLen) {
  ContiguousAllocator a(8, 4);
  ASSERT_TRUE(a.Admit(1));
  EXPECT_TRUE(a.AllocateSlots(1, 4));
  EXPECT_FALSE(a.AllocateSlots(1, 1));
  EXPECT_EQ(a.num_used_tokens(), 4);
  EXPECT_DOUBLE_EQ(a.Waste(), 0.0);
}

TEST(ContiguousAllocatorTest, FreeReturnsTheRegion) {
  ContiguousAllocator a(8, 4);
  ASSERT_TRUE(a.Admit(1));
  ASSERT_TRUE(a.Admit(2));
  a.AllocateSlots(1, 2);
  a.Free(1);
  a.Free(1);  // unknown now: no-op
  EXPECT_EQ(a.num_requests(), 1);
  EXPECT_EQ(a.num_used_tokens(), 0);
  ASSERT_TRUE(a.Admit(3));
  std::vector<int64_t> slots;
  a.AppendSlotMapping(3, 0, 1, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{0}));  // request 1's region, reused
  a.Free(2);
  a.Free(3);
  EXPECT_DOUBLE_EQ(a.Usage(), 0.0);
  EXPECT_DOUBLE_EQ(a.Waste(), 0.0);
}

}  // namespace
}  // namespace pagoda
