// The losses against their textbook formulas, for class-index targets.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.hpp"
#include "train/loss.hpp"

namespace tandem::train {
namespace {

struct Batch {
  torch::Tensor logits = torch::randn({6, 4}, torch::TensorOptions().dtype(torch::kFloat64));
  torch::Tensor targets = torch::tensor({0, 3, 1, 1, 2, 0}, torch::kLong);
  torch::Tensor oneHot() const { return torch::one_hot(targets, 4).to(torch::kFloat64); }
};

double value(const torch::Tensor& t) { return t.item<double>(); }

TEST(Loss, CrossEntropyIsTheMeanNegativeLogSoftmaxOfTheTarget) {
  torch::manual_seed(1);
  Batch b;
  auto expected = -(torch::log_softmax(b.logits, 1) * b.oneHot()).sum(1).mean();
  EXPECT_NEAR(value(computeLoss("cross_entropy", b.logits, b.targets)), value(expected), 1e-12);
}

TEST(Loss, NllReadsLogProbabilities) {
  torch::manual_seed(2);
  Batch b;
  auto log_probs = torch::log_softmax(b.logits, 1);
  auto expected = -(log_probs * b.oneHot()).sum(1).mean();
  EXPECT_NEAR(value(computeLoss("nll", log_probs, b.targets)), value(expected), 1e-12);
}

TEST(Loss, MseComparesWithOneHotTargetsOverEveryElement) {
  torch::manual_seed(3);
  Batch b;
  auto expected = (b.logits - b.oneHot()).pow(2).mean();
  EXPECT_NEAR(value(computeLoss("mse", b.logits, b.targets)), value(expected), 1e-12);
  // Float targets are taken as they are.
  auto soft = torch::rand({6, 4}, torch::kFloat64);
  EXPECT_NEAR(value(computeLoss("mse", b.logits, soft)), value((b.logits - soft).pow(2).mean()), 1e-12);
}

TEST(Loss, BceWithLogitsComparesEachOutputWithItsOneHotBit) {
  torch::manual_seed(4);
  Batch b;
  auto p = torch::sigmoid(b.logits);
  auto y = b.oneHot();
  auto expected = -(y * p.log() + (1 - y) * (1 - p).log()).mean();
  EXPECT_NEAR(value(computeLoss("bce_with_logits", b.logits, b.targets)), value(expected), 1e-12);
}

TEST(Loss, UnknownNamesAreRefused) {
  EXPECT_THROW(requireKnownLoss("hinge"), InputError);
  EXPECT_NO_THROW(requireKnownLoss("mse"));
  Batch b;
  EXPECT_THROW(computeLoss("l1", b.logits, b.targets), InputError);
}

}  // namespace
}  // namespace tandem::train
