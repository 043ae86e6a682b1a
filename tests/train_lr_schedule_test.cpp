#include <gtest/gtest.h>

#include "core/error.hpp"
#include "train/config.hpp"
#include "train/lr_schedule.hpp"

namespace tandem::train {
namespace {

OptimizerConfig withLr(double lr) {
  OptimizerConfig o;
  o.lr = lr;
  return o;
}

TEST(LrSchedule, ConstantIsBaseRate) {
  LrSchedule s(withLr(0.1), {}, 10, 100);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(99), 0.1);
}

TEST(LrSchedule, PiecewiseBySteps) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kPiecewise;
  c.boundaries = {10, 20};
  c.values = {1.0, 0.1, 0.01};
  LrSchedule s(withLr(1.0), c, 5, 100);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 0.1);
  EXPECT_DOUBLE_EQ(s.at(19), 0.1);
  EXPECT_DOUBLE_EQ(s.at(20), 0.01);
}

TEST(LrSchedule, PiecewiseByEpochs) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kPiecewise;
  c.unit = LrUnit::kEpoch;
  c.boundaries = {2};
  c.values = {0.5, 0.05};
  LrSchedule s(withLr(0.5), c, /*steps_per_epoch=*/7, 100);
  EXPECT_DOUBLE_EQ(s.at(13), 0.5);   // epoch 1
  EXPECT_DOUBLE_EQ(s.at(14), 0.05);  // epoch 2
}

TEST(LrSchedule, CosineGoesFromBaseToFloor) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kCosine;
  c.min_lr = 0.001;
  LrSchedule s(withLr(0.1), c, 10, 101);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_NEAR(s.at(50), (0.1 + 0.001) / 2, 1e-3);
  EXPECT_NEAR(s.at(101), 0.001, 1e-12);
  EXPECT_GT(s.at(30), s.at(31));
}

TEST(LrSchedule, LinearWarmupScalesAnySchedule) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kCosine;
  c.warmup_steps = 4;
  LrSchedule s(withLr(0.4), c, 10, 104);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1), 0.2);
  EXPECT_DOUBLE_EQ(s.at(3), 0.4);
  EXPECT_DOUBLE_EQ(s.at(4), 0.4);  // cosine starts after warmup
  EXPECT_LT(s.at(5), 0.4);
}

TEST(LrSchedule, InconsistentConfigsAreInputErrorsNamingTheFlag) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kPiecewise;
  c.boundaries = {10};
  c.values = {0.1};
  try {
    LrSchedule(withLr(0.1), c, 10, 100);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-values"), std::string::npos) << e.what();
  }
  c.values = {0.1, 0.2, 0.3};
  c.boundaries = {20, 10};
  EXPECT_THROW(LrSchedule(withLr(0.1), c, 10, 100), InputError);
  // An unknown schedule is refused where it is read (a config or checkpoint).
  EXPECT_THROW(trainConfigFromJson({{"lr", {{"kind", "exponential"}}}}), InputError);
  EXPECT_THROW(trainConfigFromJson({{"lr", {{"unit", "week"}}}}), InputError);
}

TEST(LrSchedule, LinearScalingWarmsUpFromTheUnscaledRate) {
  // Goyal et al.: k workers -> k x the rate, reached by a linear ramp that
  // starts at the single-worker rate.
  LrScheduleConfig c;
  c.scaling = LrScaling::kLinear;
  c.warmup_steps = 10;
  LrSchedule s(withLr(0.1), c, 100, 1000, 4.0);
  EXPECT_DOUBLE_EQ(s.at(0), 0.4 * (0.25 + 0.75 * 0.1));
  EXPECT_DOUBLE_EQ(s.at(4), 0.4 * (0.25 + 0.75 * 0.5));
  EXPECT_DOUBLE_EQ(s.at(9), 0.4);
  EXPECT_DOUBLE_EQ(s.at(500), 0.4);
  // Scaling multiplies every stage of a schedule.
  c.kind = LrScheduleKind::kPiecewise;
  c.boundaries = {100};
  c.values = {0.1, 0.01};
  c.warmup_steps = 0;
  LrSchedule piecewise(withLr(0.1), c, 10, 1000, 2.0);
  EXPECT_DOUBLE_EQ(piecewise.at(50), 0.2);
  EXPECT_DOUBLE_EQ(piecewise.at(150), 0.02);
}

TEST(LrSchedule, ScaleIsIgnoredWithoutLinearScaling) {
  LrScheduleConfig c;
  c.warmup_steps = 4;
  LrSchedule s(withLr(0.1), c, 100, 1000, 8.0);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1 * 0.25);  // ramps from 0 as before
  EXPECT_DOUBLE_EQ(s.at(10), 0.1);
  // An unknown rule cannot reach a schedule: a run config naming one is refused.
  EXPECT_THROW(nlohmann::json("square-root").get<LrScaling>(), InputError);
}

}  // namespace
}  // namespace tandem::train
