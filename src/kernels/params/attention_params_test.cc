// The side pool's split of a query's keys (attention_params.h): the codes span holds exactly the
// window's keys that SidePoolKeyWide sends to codes, and the span and the rest ranges cover the
// window once.
#include "kernels/params/attention_params.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {
namespace {

TEST(SidePoolSpanTest, TheCodesSpanIsExactlyTheKeysThatReadCodes) {
  int64_t cases = 0, empty_spans = 0, two_ranges = 0;
  for (const int64_t block_size : {1, 2, 8, 16, 64}) {
    for (const int64_t sink : {0, 1, 5, 20}) {
      for (const int64_t recent : {0, 1, 3, 16, 40}) {
        for (const bool own_block_wide : {false, true}) {
          for (const int64_t window : {0, 7, 50}) {
            PagedAttentionParams p;
            p.block_size = block_size;
            p.sink_tokens = sink;
            p.recent_tokens = recent;
            p.own_block_wide = own_block_wide;
            p.sliding_window = window;
            for (int64_t pos = 0; pos < 150; ++pos) {
              SCOPED_TRACE("block " + std::to_string(block_size) + " sink " + std::to_string(sink) + " recent " +
                           std::to_string(recent) + (own_block_wide ? " kivi2" : "") + " window " +
                           std::to_string(window) + " pos " + std::to_string(pos));
              const int64_t first = AttentionWindowStart(pos, window);
              const CodesSpan span = SidePoolCodesSpan(p, first, pos);
              const SidePoolRest rest = SidePoolRestRanges(p, first, pos);
              ASSERT_GE(rest.count, 0);
              ASSERT_LE(rest.count, 2);
              std::vector<int> covered(pos + 1, 0);
              if (!span.empty()) {
                ASSERT_GE(span.first, first);
                ASSERT_LE(span.last, pos);
                for (int64_t k = span.first; k <= span.last; ++k) ++covered[k];
              }
              for (int i = 0; i < rest.count; ++i) {
                ASSERT_GE(rest.start[i], first);
                ASSERT_LT(rest.start[i], rest.end[i]);  // no empty range
                ASSERT_LE(rest.end[i], pos + 1);
                for (int64_t k = rest.start[i]; k < rest.end[i]; ++k) ++covered[k];
              }
              for (int64_t k = 0; k <= pos; ++k) {
                ASSERT_EQ(covered[k], k >= first ? 1 : 0) << "key " << k;
                if (k < first) continue;
                const bool in_span = !span.empty() && k >= span.first && k <= span.last;
                ASSERT_EQ(in_span, !SidePoolKeyWide(p, k, pos)) << "key " << k;
              }
              ++cases;
              empty_spans += span.empty();
              two_ranges += rest.count == 2;
            }
          }
        }
      }
    }
  }
  // The grid reaches every kind of split: empty spans (a query inside its first block, or
  // among the sink tokens) and spans with keys on both sides.
  EXPECT_GT(empty_spans, 0);
  EXPECT_GT(two_ranges, 0);
  EXPECT_EQ(cases, 5 * 4 * 5 * 2 * 3 * 150);
}

}  // namespace
}  // namespace pagoda
