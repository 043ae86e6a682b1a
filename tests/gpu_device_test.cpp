// Tests that need a GPU (ctest -L gpu); each skips, naming why, without one.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "train/device.hpp"
#include "train/device_feeder.hpp"
#include "support/numbered_batches.hpp"
#include "train/gradient_capture.hpp"
#include "support/optimizer_gap.hpp"

namespace tandem::train {
namespace {

using testing::numberOf;

// The device worker 0 of this host takes under --device auto; a test that
// needs a GPU skips, saying why, where that is the CPU.
#define TANDEM_NEED_GPU(name)                                                   \
  const TrainingDevice name##_choice = chooseTrainingDevice("auto", {});        \
  if (!name##_choice.device.is_cuda()) GTEST_SKIP() << "no GPU here: " << name##_choice.reason; \
  const torch::Device name = name##_choice.device

// Where a GPU is visible: batches arrive on it with their values, through
// the copy stream and its events.
TEST(DeviceFeederTest, StreamCopierDeliversBatchesOnTheGpu) {
  TANDEM_NEED_GPU(device);
  int64_t taken = 0;
  auto pinned = [&] {
    data::Batch b = testing::numberedBatch(taken++);
    return data::Batch{b.inputs.pin_memory(), b.targets.pin_memory()};
  };
  DeviceFeeder feeder(pinned, 50, makeStreamCopier(device));
  for (int64_t i = 0; i < 50; ++i) {
    const data::Batch b = feeder.next();
    ASSERT_TRUE(b.inputs.is_cuda());
    // Read on the compute stream, which waited on the copy's event.
    EXPECT_EQ(b.inputs.sum().item<float>(), 4.0F * static_cast<float>(i));
    EXPECT_EQ(numberOf(b), i);
  }
}

TEST(GpuDeviceTest, EachLocalRankGetsItsOwnGpuAndTooManyAreRefused) {
  TANDEM_NEED_GPU(first);
  EXPECT_EQ(first.index(), 0);
  const int visible = static_cast<int>(torch::cuda::device_count());
  for (int rank = 0; rank < visible; ++rank) {
    EXPECT_EQ(chooseTrainingDevice("cuda", {rank, visible, "test"}).device.index(), rank);
  }
  EXPECT_THROW(chooseTrainingDevice("cuda", {visible, visible + 1, "test"}), InputError);
}

TEST(GpuDeviceTest, OptimizerStateMovesToTheGpuAndStepsThere) {
  TANDEM_NEED_GPU(device);
  torch::nn::Linear layer(4, 2);
  torch::optim::Adam adam(layer->parameters(), torch::optim::AdamOptions(0.1));
  layer(torch::ones({3, 4})).sum().backward();
  adam.step();  // state on the CPU, as a restored checkpoint's is
  layer->to(device);
  moveOptimizerState(adam, device);
  adam.zero_grad();
  layer(torch::ones({3, 4}, device)).sum().backward();
  adam.step();
  for (const auto& [key, state] : adam.state()) {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*state);
    EXPECT_TRUE(s.exp_avg().is_cuda());
    EXPECT_EQ(s.step(), 2);
  }
}

TEST(GpuDeviceTest, MultiTensorStepOnTheGpuMatchesTheCpuKernels) {
  TANDEM_NEED_GPU(device);
  using testing::configFor;
  EXPECT_LT(testing::gapAfter(device, configFor("sgd", 0.9, true, 1e-4), 4), 1e-6);
  EXPECT_LT(testing::gapAfter(device, configFor("adam", 0.0, false, 1e-2), 4), 1e-6);
  EXPECT_LT(testing::gapAfter(device, configFor("adamw", 0.0, false, 1e-2), 4), 1e-6);
}

TEST(GpuDeviceTest, DistributedGradientsRefuseGpuParameters) {
  TANDEM_NEED_GPU(device);
  const torch::Tensor p = torch::zeros({3}, torch::TensorOptions().device(device).requires_grad(true));
  EXPECT_THROW(GradientCapture({p}, {0}, 3, {{0, 3}}, true, [](size_t) {}), InputError);
}

}  // namespace
}  // namespace tandem::train
