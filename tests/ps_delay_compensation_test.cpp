// DC-ASGD's correction as arithmetic, with values worked by hand.
#include "ps/delay_compensation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace tandem::ps {
namespace {

TEST(DelayCompensation, CorrectsTowardsTheValuesNowHeldScaledByTheMeanSquare) {
  const std::vector<float> grad{1.0f, -2.0f}, now{1.0f, 1.0f}, pulled{0.0f, 2.0f};
  std::vector<float> mean_square{0.0f, 0.0f}, out = grad;
  compensateDelay(out, now, pulled, mean_square, 0.5f);
  // ms = 0.05 g^2; lambda = 0.5 / sqrt(ms + 1e-7); g + lambda g^2 (now - pulled).
  EXPECT_FLOAT_EQ(mean_square[0], 0.05f);
  EXPECT_FLOAT_EQ(mean_square[1], 0.2f);
  EXPECT_NEAR(out[0], 1.0 + 0.5 / std::sqrt(0.05 + 1e-7) * 1.0 * 1.0, 1e-5);
  EXPECT_NEAR(out[1], -2.0 + 0.5 / std::sqrt(0.2 + 1e-7) * 4.0 * -1.0, 1e-5);
  // The mean square decays by 0.95 per push.
  out = grad;
  compensateDelay(out, now, now, mean_square, 0.5f);
  EXPECT_FLOAT_EQ(mean_square[0], 0.95f * 0.05f + 0.05f);
  EXPECT_EQ(out, grad) << "no delay, no correction";
}

TEST(DelayCompensation, RefusesSpansOfOtherLengths) {
  std::vector<float> grad{2.0f, 1.0f}, mean_square{0.0f};
  const std::vector<float> now{3.0f, 1.0f}, pulled{1.0f, 1.0f};
  EXPECT_THROW(compensateDelay(grad, now, pulled, mean_square, 1.0f), Error);
  EXPECT_EQ(grad, (std::vector<float>{2.0f, 1.0f})) << "refused before any change";
}

}  // namespace
}  // namespace tandem::ps
