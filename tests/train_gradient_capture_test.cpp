// GradientCapture without a network: which groups are handed over when, and
// what their floats hold, for PS-style chunks that cut through parameters.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.hpp"
#include "support/held_transfer.hpp"
#include "train/gradient_capture.hpp"

namespace tandem::train {
namespace {

// y = (w2 * relu(w1 * x)).sum(): backward produces w2's gradient before w1's.
struct TwoTensors {
  torch::Tensor w1 = torch::randn({6}).set_requires_grad(true);
  torch::Tensor w2 = torch::randn({6}).set_requires_grad(true);
  torch::Tensor loss(const torch::Tensor& x) const { return (w2 * torch::relu(w1 * x)).sum(); }
  // The gradients of loss(x), on copies, so that the capture's hooks stay out.
  std::pair<torch::Tensor, torch::Tensor> expected(const torch::Tensor& x) const {
    TwoTensors copy;
    copy.w1 = w1.detach().clone().set_requires_grad(true);
    copy.w2 = w2.detach().clone().set_requires_grad(true);
    auto g = torch::autograd::grad({copy.loss(x)}, {copy.w1, copy.w2});
    return {g[0], g[1]};
  }
};

TEST(GradientCapture, UnorderedGroupsGoAsSoonAsCompleteAndHoldScaledGradients) {
  torch::manual_seed(2);
  TwoTensors m;
  // Key order w1 [0, 6), w2 [6, 12); chunks [0, 4), [4, 8) cutting both, [8, 12).
  std::vector<size_t> handed;
  std::vector<torch::Tensor> copies(3);
  GradientCapture* self = nullptr;
  GradientCapture capture({m.w1, m.w2}, {0, 6}, 12, {{0, 4}, {4, 4}, {8, 4}}, /*in_order=*/false,
                          [&](size_t g) {
                            handed.push_back(g);
                            copies[g] = self->group(g).clone();
                          });
  self = &capture;
  const auto x = torch::randn({6});
  capture.beginMicroStep(0, true, 0.5);
  m.loss(x).backward();
  // w2 first: chunk 2 is complete at once; chunks 0 and 1 need w1 too.
  EXPECT_EQ(handed, (std::vector<size_t>{2, 0, 1}));
  const auto [g1, g2] = m.expected(x);
  const auto expected = torch::cat({g1, g2}) * 0.5;
  EXPECT_TRUE(torch::allclose(torch::cat(copies), expected));
  capture.flush();
  EXPECT_EQ(handed.size(), 3u) << "flush hands over nothing twice";
  capture.exposeGradients();
  EXPECT_EQ(m.w1.grad().data_ptr<float>(), capture.flat().data_ptr<float>());
}

TEST(GradientCapture, MicroStepsSumAndFlushCompletesGroupsOfEarlierGradients) {
  torch::manual_seed(3);
  TwoTensors m;
  std::vector<size_t> handed;
  GradientCapture capture({m.w1, m.w2}, {0, 6}, 12, {{0, 6}, {6, 6}}, /*in_order=*/true,
                          [&](size_t g) { handed.push_back(g); });
  const auto x1 = torch::randn({6}), x2 = torch::randn({6});
  capture.beginMicroStep(0, false, 1.0);
  m.loss(x1).backward();
  EXPECT_TRUE(handed.empty()) << "nothing goes before the last micro-step";
  capture.beginMicroStep(1, true, 1.0);
  // The last micro-step reaches only w2; w1's gradient came on micro-step 0.
  (m.w2 * x2).sum().backward();
  EXPECT_TRUE(handed.empty()) << "in order: group 1 waits for group 0";
  capture.flush();
  EXPECT_EQ(handed, (std::vector<size_t>{0, 1}));
  const auto [w1_grad, w2_grad] = m.expected(x1);
  EXPECT_TRUE(torch::allclose(capture.group(0), w1_grad));
  EXPECT_TRUE(torch::allclose(capture.group(1), w2_grad + x2));

  // The next update starts clean: an untouched parameter contributes zeros.
  handed.clear();
  capture.beginMicroStep(0, true, 1.0);
  (m.w2 * x2).sum().backward();
  capture.flush();
  EXPECT_EQ(handed, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(capture.group(0).abs().sum().item<float>(), 0.0f);
}

TEST(GradientCapture, RefusesLayoutsOutsideTheBuffer) {
  TwoTensors m;
  EXPECT_THROW(GradientCapture({m.w1, m.w2}, {0, 6}, 10, {{0, 10}}, true, [](size_t) {}), Error);
  EXPECT_THROW(GradientCapture({m.w1, m.w2}, {0, 6}, 12, {{8, 8}}, true, [](size_t) {}), Error);
  auto ints = torch::zeros({3}, torch::kInt64);
  EXPECT_THROW(GradientCapture({ints}, {0}, 3, {{0, 3}}, true, [](size_t) {}), Error);
}

// A channels-last parameter's gradient keeps its layout: fused optimizer
// kernels read a parameter and its gradient as one layout.
TEST(GradientCapture, SlotsTakeTheParametersStrides) {
  const torch::Tensor w =
      torch::randn({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast).set_requires_grad(true);
  GradientCapture capture({w}, {0}, w.numel(), {{0, w.numel()}}, true, [](size_t) {});
  capture.beginMicroStep(0, true, 1.0);
  const torch::Tensor x = torch::randn({2, 3, 4, 5});
  (w * x).sum().backward();
  capture.exposeGradients();
  EXPECT_EQ(w.grad().strides(), w.strides());
  EXPECT_TRUE(torch::equal(w.grad(), x));
  EXPECT_EQ(w.grad().data_ptr<float>(), capture.flat().data_ptr<float>());
}

// A replica's parameters on two devices cannot share one buffer of slots:
// refused naming both.
TEST(GradientCapture, RefusesParametersOnTwoDevicesNamingThem) {
  const torch::Tensor here = torch::zeros({3}).set_requires_grad(true);
  const torch::Tensor elsewhere = torch::zeros({3}, torch::TensorOptions().device(torch::kMeta).requires_grad(true));
  try {
    GradientCapture capture({here, elsewhere}, {0, 3}, 6, {{0, 6}}, true, [](size_t) {});
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1 is on meta but parameter 0 is on cpu"), std::string::npos)
        << e.what();
  }
}

// Staged through host memory, as a GPU model's gradients are: a group's
// host values are there only once awaited, floats past the slots (a
// caller's tail) are the caller's, and exposeGradients brings the host
// values (e.g. sums) back into the slots the parameters' .grad point at.
TEST(GradientCapture, StagedGroupsAreReadAfterTheirCopyAndComeBackToTheSlots) {
  torch::manual_seed(4);
  TwoTensors m;
  auto transfer = std::make_shared<testing::HeldTransfer>();
  std::vector<size_t> handed;
  GradientCapture capture({m.w1, m.w2}, {0, 6}, 14, {{0, 6}, {6, 8}}, /*in_order=*/true,
                          [&](size_t g) { handed.push_back(g); }, {}, transfer);
  ASSERT_TRUE(capture.staged());
  const auto x = torch::randn({6});
  capture.beginMicroStep(0, true, 0.25);
  m.loss(x).backward();
  capture.flat().narrow(0, 12, 2).fill_(7.0f);  // the caller's tail, written on the host
  EXPECT_EQ(handed, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(transfer->to_host, 2);
  const auto [g1, g2] = m.expected(x);
  EXPECT_FALSE(torch::allclose(capture.group(0), g1 * 0.25)) << "host values before the copy was awaited";
  capture.awaitOnHost(0);
  capture.awaitOnHost(1);
  EXPECT_TRUE(torch::allclose(capture.group(0), g1 * 0.25));
  EXPECT_TRUE(torch::allclose(capture.group(1).narrow(0, 0, 6), g2 * 0.25));
  EXPECT_TRUE(torch::equal(capture.group(1).narrow(0, 6, 2), torch::full({2}, 7.0f))) << "the tail is not copied over";

  capture.flat().mul_(2.0f);  // what a sum across workers would do
  capture.exposeGradients();
  EXPECT_EQ(transfer->to_device, 1);
  EXPECT_TRUE(torch::allclose(m.w1.grad(), g1 * 0.5));
  EXPECT_TRUE(torch::allclose(m.w2.grad(), g2 * 0.5));
  EXPECT_NE(m.w1.grad().data_ptr<float>(), capture.flat().data_ptr<float>()) << "the slots are not the host buffer";

  // The next update waits for the copy back before rewriting the host buffer.
  capture.beginMicroStep(0, true, 1.0);
  m.loss(x).backward();
  capture.awaitOnHost(0);
  EXPECT_TRUE(torch::allclose(capture.group(0), g1));
  transfer->checkHazards();
  EXPECT_TRUE(transfer->rewritten_early.empty()) << transfer->rewritten_early.front();
}

}  // namespace
}  // namespace tandem::train
