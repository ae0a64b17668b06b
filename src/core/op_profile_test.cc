#include "core/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>

namespace pagoda {
namespace {

void Spin(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(OpProfileTest, RecordsNothingWhenDisabled) {
  EnableOpProfile(false);
  TakeOpProfile();
  { const ScopedOpTimer t(OpKind::kMatMul, 100); }
  const OpProfile p = TakeOpProfile();
  EXPECT_EQ(p.calls[static_cast<int>(OpKind::kMatMul)], 0);
  EXPECT_EQ(p.total_seconds(), 0.0);
}

TEST(OpProfileTest, NestedTimersTakeTheirTimeOutOfTheOuterOne) {
  EnableOpProfile(true);
  TakeOpProfile();
  const auto start = std::chrono::steady_clock::now();
  {
    const ScopedOpTimer outer(OpKind::kMatMul, 1000);
    Spin(0.002);
    {
      const ScopedOpTimer inner(OpKind::kQuantize);
      Spin(0.004);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const OpProfile p = TakeOpProfile();
  EnableOpProfile(false);
  const int mm = static_cast<int>(OpKind::kMatMul), q = static_cast<int>(OpKind::kQuantize);
  EXPECT_EQ(p.calls[mm], 1);
  EXPECT_EQ(p.calls[q], 1);
  EXPECT_EQ(p.ops[mm], 1000);
  EXPECT_GE(p.seconds[q], 0.004);
  EXPECT_GE(p.seconds[mm], 0.002);
  // Each kind holds its own time only: counted twice, the inner spin would push the sum
  // past the wall time around both.
  EXPECT_LE(p.seconds[mm] + p.seconds[q], wall);
  EXPECT_NEAR(p.total_seconds(), p.seconds[mm] + p.seconds[q], 1e-12);
  // Taking the profile starts a new one.
  EXPECT_EQ(TakeOpProfile().total_seconds(), 0.0);
}

}  // namespace
}  // namespace pagoda
