// Tests that need a GPU (ctest -L gpu); each skips, naming why, without one.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "train/device.hpp"
#include "train/device_feeder.hpp"
#include "support/numbered_batches.hpp"
#include "collective/nccl_communicator.hpp"
#include "train/chunked_parameters.hpp"
#include "train/nccl_buckets.hpp"
#include "train/gradient_capture.hpp"
#include "support/optimizer_gap.hpp"

namespace tandem::train {
namespace {

using testing::numberOf;

// The device worker 0 of this host takes under --device auto; a test that
// needs a GPU skips, saying why, where that is the CPU.
#define TANDEM_NEED_GPU(name)                                                   \
  const TrainingDevice name##_choice = chooseTrainingDevice("auto", {}, captureEnvironment());        \
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
    EXPECT_EQ(chooseTrainingDevice("cuda", {rank, visible, "test"}, captureEnvironment()).device.index(), rank);
  }
  EXPECT_THROW(chooseTrainingDevice("cuda", {visible, visible + 1, "test"}, captureEnvironment()), InputError);
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

// Distributed gradients of a GPU model cross to page-locked host memory on
// the copy stream, and sums come back to the slots .grad points at.
// Without staging (NCCL's case) the handed-over groups are the device slots.
TEST(GpuDeviceTest, UnstagedGradientsStayOnTheGpu) {
  TANDEM_NEED_GPU(device);
  const torch::Tensor w = torch::ones({8}, device).set_requires_grad(true);
  GradientCapture capture({w}, {0}, 8, {{0, 8}}, true, [](size_t) {});
  EXPECT_FALSE(capture.staged());
  capture.beginMicroStep(0, true, 1.0);
  (w * 3).sum().backward();
  ASSERT_TRUE(capture.group(0).is_cuda());
  capture.exposeGradients();
  EXPECT_EQ(w.grad().data_ptr<float>(), capture.flat().data_ptr<float>());
  EXPECT_TRUE(torch::equal(w.grad().cpu(), torch::full({8}, 3.0f)));
}

TEST(GpuDeviceTest, GradientsStageThroughTheHostAndBack) {
  TANDEM_NEED_GPU(device);
  torch::manual_seed(5);
  const torch::Tensor w1 = torch::randn({1000}, device).set_requires_grad(true);
  const torch::Tensor w2 = torch::randn({3000}, device).set_requires_grad(true);
  std::vector<size_t> handed;
  GradientCapture capture({w1, w2}, {0, 1000}, 4002, {{0, 1000}, {1000, 3002}}, /*in_order=*/true,
                          [&](size_t g) { handed.push_back(g); }, {}, hostStagingFor(device));
  ASSERT_TRUE(capture.staged());
  ASSERT_TRUE(capture.flat().is_pinned());
  const torch::Tensor x = torch::randn({1000}, device);
  capture.beginMicroStep(0, true, 0.5);
  ((w1 * x).sum() * (w2 * w2).sum()).backward();
  EXPECT_EQ(handed, (std::vector<size_t>{0, 1}));
  capture.awaitOnHost(0);
  capture.awaitOnHost(1);
  const torch::Tensor s2 = (w2 * w2).sum().detach();
  EXPECT_TRUE(torch::allclose(capture.group(0), (x * s2 * 0.5).cpu(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(capture.group(1).narrow(0, 0, 3000), (2 * w2 * (w1 * x).sum() * 0.5).detach().cpu(),
                              1e-4, 1e-4));
  capture.flat().mul_(3.0f);
  capture.exposeGradients();
  ASSERT_TRUE(w1.grad().is_cuda());
  EXPECT_TRUE(torch::allclose(w1.grad(), x * s2 * 1.5, 1e-4, 1e-5));
}

// NCCL at world size 1: the bucket path queues, completes and is awaited;
// a 16-bit wire rounds the values on the way.
TEST(GpuDeviceTest, NcclSumsBucketsAtWorldSizeOne) {
  TANDEM_NEED_GPU(device);
  ASSERT_TRUE(collective::ncclStatus().loaded) << collective::ncclStatus().detail;
  const collective::NcclOptions one{0, 1, std::chrono::seconds(20), "a test"};
  NcclBuckets exact(device, collective::makeNcclId(), one, WireDtype::kFloat32);
  NcclBuckets narrow(device, collective::makeNcclId(), one, WireDtype::kBfloat16);
  const torch::Tensor values = torch::linspace(1.0, 2.0, 4096).to(device);
  torch::Tensor a = values.clone(), b = values.clone();
  exact.reduce(a, exact.produced());
  narrow.reduce(b, narrow.produced());
  exact.awaitAll("a float32 sum");
  narrow.awaitAll("a bf16 sum");
  exact.computeWaits();
  narrow.computeWaits();
  EXPECT_TRUE(torch::equal(a, values));
  EXPECT_TRUE(torch::equal(b, values.to(torch::kBFloat16).to(torch::kFloat32)));
  EXPECT_FALSE(torch::equal(b, values));
  EXPECT_GE(exact.setupSeconds(), 0.0);
}

// A GPU model's chunks land on the device from their host copies.
TEST(GpuDeviceTest, ChunksLandOnTheGpu) {
  TANDEM_NEED_GPU(device);
  const torch::Tensor a = torch::arange(0, 6, torch::TensorOptions().device(device)).to(torch::kFloat32);
  const torch::Tensor b = torch::arange(100, 109, torch::TensorOptions().device(device)).to(torch::kFloat32);
  const ps::KeyLayout layout = ps::buildKeyLayout({{"a", 6}, {"b", 9}}, 2, 4 * 4);
  ChunkedParameters model({a, b}, layout);
  ASSERT_TRUE(model.staged());
  EXPECT_EQ(model.gather(1), (std::vector<float>{4, 5, 100, 101}));
  const std::vector<float> values{-1, -2, -3, -4};
  model.scatter(1, values.data(), WireDtype::kFloat32);
  EXPECT_TRUE(torch::equal(a.cpu(), torch::tensor({0.f, 1.f, 2.f, 3.f, -1.f, -2.f})));
  EXPECT_TRUE(torch::equal(b.cpu().narrow(0, 0, 3), torch::tensor({-3.f, -4.f, 102.f})));
}

}  // namespace
}  // namespace tandem::train
