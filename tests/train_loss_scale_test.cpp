#include "train/loss_scale.hpp"

#include <gtest/gtest.h>

namespace tandem::train {
namespace {

TEST(LossScaleTest, AnOverflowSkipsTheStepAndHalvesTheScale) {
  LossScale scale;
  EXPECT_EQ(scale.scale(), 65536.0);
  EXPECT_FALSE(scale.update(/*found_inf=*/true));
  EXPECT_EQ(scale.scale(), 32768.0);
  EXPECT_FALSE(scale.update(true));
  EXPECT_EQ(scale.scale(), 16384.0);
  EXPECT_EQ(scale.skipped(), 2);
  EXPECT_TRUE(scale.update(false));
  EXPECT_EQ(scale.scale(), 16384.0);
}

TEST(LossScaleTest, GrowsAfterAnIntervalOfCleanStepsInARow) {
  LossScale scale({.initial = 8, .growth = 2, .backoff = 0.5, .interval = 3});
  EXPECT_TRUE(scale.update(false));
  EXPECT_TRUE(scale.update(false));
  EXPECT_EQ(scale.scale(), 8);
  EXPECT_TRUE(scale.update(false));
  EXPECT_EQ(scale.scale(), 16);  // the third clean step in a row
  // An overflow restarts the count.
  EXPECT_TRUE(scale.update(false));
  EXPECT_TRUE(scale.update(false));
  EXPECT_FALSE(scale.update(true));
  EXPECT_EQ(scale.scale(), 8);
  EXPECT_TRUE(scale.update(false));
  EXPECT_TRUE(scale.update(false));
  EXPECT_EQ(scale.scale(), 8);
  EXPECT_TRUE(scale.update(false));
  EXPECT_EQ(scale.scale(), 16);
  EXPECT_EQ(scale.skipped(), 1);
}

}  // namespace
}  // namespace tandem::train
