// The loss watch: a collapse is a loss that is not finite, or a recent mean
// back above the start after the run made progress; nothing else is.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/loss_watch.hpp"

namespace tandem::train {
namespace {

// Feeds `loss(step)` for steps 1..last; returns the first collapse.
template <class Loss>
std::optional<Collapse> feed(LossWatch& watch, int64_t last, Loss&& loss) {
  for (int64_t step = 1; step <= last; ++step) {
    if (auto c = watch.observe(step, loss(step))) return c;
  }
  return std::nullopt;
}

TEST(LossWatch, ANonFiniteLossIsACollapseAtOnce) {
  LossWatch watch(10);
  auto c = feed(watch, 30, [](int64_t s) { return s == 3 ? std::numeric_limits<double>::quiet_NaN() : 2.3; });
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 3);
  EXPECT_TRUE(c->non_finite);
  EXPECT_EQ(c->describe(10), "the loss became nan at step 3");
}

TEST(LossWatch, AFallingLossWithNoiseIsNever) {
  LossWatch watch(10);
  EXPECT_FALSE(feed(watch, 2000, [](int64_t s) { return 2.3 * std::exp(-s / 300.0) + 0.2 * (s % 3); }));
}

TEST(LossWatch, ALossThatNeverFallsIsLeftAlone) {
  LossWatch watch(10);
  EXPECT_FALSE(feed(watch, 500, [](int64_t s) { return 2.3 + 0.3 * ((s % 7) - 3) / 3.0; }));
}

TEST(LossWatch, ARiseThatStaysBelowTheStartIsNotACollapse) {
  LossWatch watch(10);
  // Down to 0.5, then up to 2.0: worse, but still below the 2.3 it began at.
  EXPECT_FALSE(feed(watch, 400, [](int64_t s) { return s < 100 ? 2.3 - s * 0.018 : s < 200 ? 0.5 : 2.0; }));
}

TEST(LossWatch, ProgressLostAndMoreIsACollapseWithinTheWindow) {
  LossWatch watch(10);
  // 2.3 for ten steps, 0.6 from step 11, then 3.0 from step 101 on.
  auto c = feed(watch, 400, [](int64_t s) { return s <= 10 ? 2.3 : s <= 100 ? 0.6 : 3.0; });
  ASSERT_TRUE(c.has_value());
  // The window's mean passes 2.3 once 8 of its 10 losses are 3.0: step 108.
  EXPECT_EQ(c->step, 108);
  EXPECT_FALSE(c->non_finite);
  EXPECT_DOUBLE_EQ(c->start, 2.3);
  EXPECT_NEAR(c->best, 0.6, 1e-12);
  EXPECT_NEAR(c->now, 0.6 + 0.24 * 8, 1e-9);
  EXPECT_EQ(c->describe(10).rfind("the loss rose back to", 0), 0u) << c->describe(10);
  EXPECT_FALSE(watch.observe(109, std::numeric_limits<double>::infinity())) << "one report only";
}

TEST(LossWatch, ALossThatStartsAtOrBelowZeroIsWatchedForNonFiniteValuesOnly) {
  LossWatch watch(5);
  EXPECT_FALSE(feed(watch, 100, [](int64_t s) { return s < 50 ? -1.0 - s * 0.1 : 10.0; }));
  EXPECT_TRUE(watch.observe(101, std::numeric_limits<double>::infinity()));
}

}  // namespace
}  // namespace tandem::train
