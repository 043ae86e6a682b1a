#include "train/multi_tensor_step.hpp"

#include <gtest/gtest.h>

#include "support/optimizer_gap.hpp"

namespace tandem::train {
namespace {
using testing::configFor;
using testing::gapAfter;

TEST(MultiTensorStepTest, MatchesTheCpuKernelsToFloat32Tolerance) {
  // SGD with and without momentum, Nesterov and weight decay; Adam; AdamW.
  EXPECT_LT(gapAfter(torch::kCPU, configFor("sgd", 0.9, false, 0.0), 4), 1e-6);
  EXPECT_LT(gapAfter(torch::kCPU, configFor("sgd", 0.9, true, 1e-4), 4), 1e-6);
  EXPECT_LT(gapAfter(torch::kCPU, configFor("sgd", 0.0, false, 0.0), 4), 1e-6);
  EXPECT_LT(gapAfter(torch::kCPU, configFor("adam", 0.0, false, 0.0), 4), 1e-6);
  EXPECT_LT(gapAfter(torch::kCPU, configFor("adam", 0.0, false, 1e-2), 4), 1e-6);
  EXPECT_LT(gapAfter(torch::kCPU, configFor("adamw", 0.0, false, 1e-2), 4), 1e-6);
}

TEST(MultiTensorStepTest, LeavesRmspropToTorch) {
  torch::Tensor p = torch::zeros({3}, torch::requires_grad());
  p.mutable_grad() = torch::ones({3});
  torch::optim::SGD holder({p}, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(multiTensorStep(holder, configFor("rmsprop", 0.0, false, 0.0), 0.1));
  EXPECT_TRUE(torch::equal(p, torch::zeros({3})));
}

}  // namespace
}  // namespace tandem::train
