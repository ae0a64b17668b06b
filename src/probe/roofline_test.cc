// The roofline probes: the read-bandwidth buffer is far larger than the last-level cache
// (so `bench latency` divides by memory's bandwidth, not the cache's), and every probe
// returns a positive, finite figure.
#include "probe/roofline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

namespace pagoda {
namespace {

TEST(RooflineTest, ReadProbeBufferIsFarLargerThanTheLastLevelCache) {
  const int64_t llc = LastLevelCacheBytes();
  const int64_t probe = ReadProbeBytes();
  const int64_t quarter_of_memory = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE) / 4;
  EXPECT_GE(probe, std::min<int64_t>(int64_t{1} << 30, quarter_of_memory));
  if (4 * llc <= quarter_of_memory) {
    EXPECT_GE(probe, 4 * llc);
  }
  EXPECT_LE(probe, std::max<int64_t>(quarter_of_memory, int64_t{64} << 20));
}

TEST(RooflineTest, ProbesReturnPositiveFiniteFigures) {
  const double gbs = MeasureReadBandwidthGBs(int64_t{64} << 20, 1);
  EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << gbs;
  const double fma = MeasurePeakFmaGflops();
  EXPECT_TRUE(std::isfinite(fma) && fma > 0) << fma;
}

}  // namespace
}  // namespace pagoda
