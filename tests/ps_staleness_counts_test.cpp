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

TEST(StalenessCounts, TheMeanSoFarIsKeptAsEachPushIsRecorded) {
  StalenessCounts counts;
  EXPECT_EQ(counts.mean(), 0.0);
  counts.record(2);
  counts.record(4);
  EXPECT_DOUBLE_EQ(counts.mean(), 3.0);
  EXPECT_DOUBLE_EQ(counts.mean(), counts.summary().mean);
}

TEST(CorrectedMomentum, KeepsOneMinusTheMomentumTimesOnePlusTheStaleness) {
  EXPECT_DOUBLE_EQ(correctedMomentum(0.9, 0.0), 0.9);  // fresh pushes: as given
  EXPECT_NEAR(correctedMomentum(0.9, 2.95), 0.605, 1e-12);
  EXPECT_NEAR(correctedMomentum(0.9, 1.0), 0.8, 1e-12);
  EXPECT_EQ(correctedMomentum(0.9, 20.0), 0.0);  // never below 0
  EXPECT_EQ(correctedMomentum(0.0, 3.0), 0.0);
}

TEST(CorrectedMomentum, SgdAndRmspropLoseMomentumAdamItsBeta1) {
  optim::OptimizerSettings sgd = optim::optimizerDefaults("sgd");
  correctForStaleness(sgd, 3.0);
  EXPECT_NEAR(sgd.momentum, 0.6, 1e-12);
  optim::OptimizerSettings adam = optim::optimizerDefaults("adam");
  correctForStaleness(adam, 3.0);
  EXPECT_NEAR(adam.beta1, 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(adam.beta2, 0.999);
}

}  // namespace
}  // namespace tandem::ps
