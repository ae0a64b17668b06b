#include "engine/decode_padding.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace pagoda {
namespace {

TEST(DecodePaddingTest, AutoIsVllmsCaptureSizesUpToMaxNumSeqs) {
  EXPECT_EQ(ParseDecodeBatchSizes("auto", 40), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 40}));
  EXPECT_EQ(ParseDecodeBatchSizes("auto", 30), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 30}));
  EXPECT_EQ(ParseDecodeBatchSizes("auto", 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(ParseDecodeBatchSizes("auto", 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(ParseDecodeBatchSizes("none", 256).empty());
  EXPECT_TRUE(ParseDecodeBatchSizes("", 256).empty());
}

TEST(DecodePaddingTest, ListsAreSortedCappedAndReachMaxNumSeqs) {
  EXPECT_EQ(ParseDecodeBatchSizes("8,1,4,4,2", 16), (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(ParseDecodeBatchSizes("1,64,512", 100), (std::vector<int64_t>{1, 64, 100}));
  EXPECT_EQ(ParseDecodeBatchSizes("16", 16), (std::vector<int64_t>{16}));
}

TEST(DecodePaddingTest, BadListsNameTheFlag) {
  for (const char* bad : {"0", "-2", "1,,2", "1,x", "2.5", "1,", "auto,4", "99999999999999999999"}) {
    try {
      ParseDecodeBatchSizes(bad, 64);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("--cuda-graph-sizes"), std::string::npos) << e.what();
    }
  }
}

TEST(DecodePaddingTest, PadsToTheSmallestSizeThatHoldsTheBatch) {
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16};
  EXPECT_EQ(PaddedDecodeBatch(1, sizes), 1);
  EXPECT_EQ(PaddedDecodeBatch(3, sizes), 4);
  EXPECT_EQ(PaddedDecodeBatch(8, sizes), 8);
  EXPECT_EQ(PaddedDecodeBatch(9, sizes), 16);
  EXPECT_EQ(PaddedDecodeBatch(17, sizes), 17);  // beyond the largest: unpadded
  EXPECT_EQ(PaddedDecodeBatch(5, {}), 5);
}

}  // namespace
}  // namespace pagoda
