// DC-ASGD's correction as arithmetic, with values worked by hand.
#include "ps/delay_compensation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "optim/kernels.hpp"

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

TEST(DelayCompensation, ConstantLambdaKeepsNoMeanSquare) {
  const std::vector<float> grad{1.0f, -2.0f}, now{1.0f, 1.0f}, pulled{0.0f, 2.0f};
  std::vector<float> out = grad;
  compensateDelay(out, now, pulled, {}, 0.5f);
  // g + lambda0 g^2 (now - pulled)
  EXPECT_FLOAT_EQ(out[0], 1.0f + 0.5f * 1.0f * 1.0f);
  EXPECT_FLOAT_EQ(out[1], -2.0f + 0.5f * 4.0f * -1.0f);
}

// The servers fuse the correction into SGD's pass (one pass over memory
// instead of two); it must give the two-pass bits, for every SGD variant.
TEST(DelayCompensation, FusedIntoSgdGivesTheTwoPassBits) {
  const size_t n = 1037;  // not a multiple of any vector width
  std::vector<float> grad(n), param(n), pulled(n), buffer(n), mean_square(n);
  for (size_t i = 0; i < n; ++i) {
    grad[i] = std::sin(0.37f * static_cast<float>(i)) * 0.01f;
    param[i] = std::cos(0.11f * static_cast<float>(i));
    pulled[i] = param[i] + 0.001f * std::sin(static_cast<float>(i));
    buffer[i] = 0.002f * std::cos(0.7f * static_cast<float>(i));
    mean_square[i] = 1e-5f * static_cast<float>(i % 7);
  }
  const optim::SgdSettings variants[] = {
      {0.05, 0.0, 0.0, false}, {0.05, 0.9, 0.0, false}, {0.05, 0.9, 0.0, true}, {0.05, 0.9, 1e-4, false}};
  for (const bool adaptive : {true, false}) {
    for (const auto& settings : variants) {
      for (bool first : {true, false}) {
        // The constant form: empty mean squares for the pass, a null pointer fused.
        std::vector<float> g2 = grad, p2 = param, b2 = buffer, ms2 = adaptive ? mean_square : std::vector<float>{};
        compensateDelay(g2, p2, pulled, ms2, 2.0f);
        optim::sgdUpdate(p2, g2, b2, first, settings);
        std::vector<float> p1 = param, b1 = buffer, ms1 = adaptive ? mean_square : std::vector<float>{};
        const optim::DelayCorrection fused{pulled.data(), adaptive ? ms1.data() : nullptr, 2.0f, kDcMeanSquareDecay,
                                           kDcEpsilon};
        optim::sgdUpdate(p1, grad, b1, first, settings, &fused);
        EXPECT_EQ(p1, p2) << adaptive << " " << settings.momentum << " " << settings.nesterov << " " << first;
        EXPECT_EQ(ms1, ms2);
        EXPECT_EQ(b1, b2);
        EXPECT_NE(p1, param);
        // The two forms differ: the correction is not a no-op in either.
        std::vector<float> p3 = param, b3 = buffer;
        optim::sgdUpdate(p3, grad, b3, first, settings);
        EXPECT_NE(p1, p3) << "corrected like plain SGD";
      }
    }
  }
}

TEST(DelayCompensation, RefusesSpansOfOtherLengths) {
  std::vector<float> grad{2.0f, 1.0f}, mean_square{0.0f};
  const std::vector<float> now{3.0f, 1.0f}, pulled{1.0f, 1.0f};
  EXPECT_THROW(compensateDelay(grad, now, pulled, mean_square, 1.0f), Error);
  EXPECT_EQ(grad, (std::vector<float>{2.0f, 1.0f})) << "refused before any change";
}

}  // namespace
}  // namespace tandem::ps
