// The servers' count of how stale the pushes they applied were.
#include <gtest/gtest.h>

#include "ps/staleness_counts.hpp"

namespace tandem::ps {
namespace {

TEST(StalenessCounts, NothingRecordedIsAllZero) {
  const auto s = StalenessCounts().summary();
  EXPECT_EQ(s.pushes, 0u);
  EXPECT_EQ(s.mean, 0.0);
  EXPECT_EQ(s.p99, 0u);
}

TEST(StalenessCounts, MeanAndQuantilesOfWhatWasRecorded) {
  StalenessCounts counts;
  // 100 pushes: 50 fresh, 30 three updates stale, 19 five, 1 forty.
  for (int i = 0; i < 50; ++i) counts.record(0);
  for (int i = 0; i < 30; ++i) counts.record(3);
  for (int i = 0; i < 19; ++i) counts.record(5);
  counts.record(40);
  const auto s = counts.summary();
  EXPECT_EQ(s.pushes, 100u);
  EXPECT_DOUBLE_EQ(s.mean, (30 * 3 + 19 * 5 + 40) / 100.0);
  EXPECT_EQ(s.p50, 0u);   // half the pushes were fresh
  EXPECT_EQ(s.p99, 5u);   // 99 of 100 were at most 5 stale
  EXPECT_EQ(s.max, 40u);
  EXPECT_EQ(toJson(s)["p99"], 5u);
}

TEST(StalenessCounts, BeyondTheLastExactCountIsCountedAsMore) {
  StalenessCounts counts;
  counts.record(100000);
  EXPECT_EQ(counts.summary().max, StalenessCounts::kLast + 1);
}

}  // namespace
}  // namespace tandem::ps
