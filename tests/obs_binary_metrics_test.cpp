// AUC and log loss of a click model, against values worked out by hand
// (scikit-learn's roc_auc_score and log_loss give the same).
#include "obs/binary_metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace tandem::obs {
namespace {

TEST(BinaryMetrics, AucRanksPositivesAboveNegativesWithTiesHalf) {
  const std::vector<float> labels{0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, labels), 0.75);
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}, labels), 1.0);
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.4f, 0.3f, 0.2f, 0.1f}, labels), 0.0);
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, labels), 0.5);
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.2f, 0.5f, 0.5f, 0.9f}, labels), 0.875);  // one tie across classes
  EXPECT_THROW(rocAuc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1}), InputError);
  EXPECT_THROW(rocAuc(std::vector<float>{0.1f}, labels), InputError);
}

TEST(BinaryMetrics, LogLossIsTheMeanCrossEntropyClipped) {
  EXPECT_NEAR(logLoss(std::vector<float>{0.9f, 0.1f}, std::vector<float>{1, 0}), -std::log(0.9), 1e-7);
  EXPECT_NEAR(logLoss(std::vector<float>{0.0f}, std::vector<float>{1}), -std::log(1e-7), 1e-9);
  EXPECT_THROW(logLoss(std::vector<float>{}, std::vector<float>{}), InputError);
}

}  // namespace
}  // namespace tandem::obs
