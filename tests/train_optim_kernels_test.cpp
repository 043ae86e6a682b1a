// The float-span optimizer kernels (every mode's update) against torch::optim: the
// same updates, step after step, on the same data.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "core/error.hpp"
#include "optim/kernels.hpp"

namespace tandem::optim {
namespace {

std::span<float> spanOf(torch::Tensor& t) { return {t.data_ptr<float>(), static_cast<size_t>(t.numel())}; }

// Runs `steps` updates with torch's optimizer on `reference` and with the
// kernel (via `kernel_step(step, grad)`) on `ours`; returns max |difference|
// relative to max |parameter|.
template <class KernelStep>
double trackTorch(torch::optim::Optimizer& torch_opt, torch::Tensor reference, torch::Tensor ours, int steps,
                  KernelStep kernel_step) {
  torch::manual_seed(7);
  for (int step = 1; step <= steps; ++step) {
    torch::Tensor grad = torch::randn_like(reference) * 0.1;
    reference.mutable_grad() = grad.clone();
    torch_opt.step();
    kernel_step(step, grad);
  }
  return ((reference - ours).abs().max() / reference.abs().max()).item<double>();
}

TEST(PsKernels, SgdMatchesTorchWithMomentumNesterovAndWeightDecay) {
  for (bool nesterov : {false, true}) {
    torch::manual_seed(1);
    torch::Tensor reference = torch::randn({4099}).set_requires_grad(true);
    torch::Tensor ours = reference.detach().clone();
    torch::Tensor buffer = torch::zeros_like(ours);
    torch::Tensor start = ours.clone();
    SgdSettings s{0.05, 0.9, 1e-4, nesterov};
    torch::optim::SGD torch_opt({reference},
                                torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay)
                                    .nesterov(nesterov));
    double difference = trackTorch(torch_opt, reference, ours, 50, [&](int step, torch::Tensor grad) {
      sgdUpdate(spanOf(ours), spanOf(grad), spanOf(buffer), step == 1, s);
    });
    EXPECT_LT(difference, 1e-6) << "nesterov " << nesterov;
    EXPECT_GT((ours - start).abs().max().item<double>(), 1e-3);  // the parameters did move
  }
}

TEST(PsKernels, AdamMatchesTorch) {
  torch::manual_seed(2);
  torch::Tensor reference = torch::randn({5003}).set_requires_grad(true);
  torch::Tensor ours = reference.detach().clone();
  torch::Tensor start = ours.clone();
  torch::Tensor m = torch::zeros_like(ours), v = torch::zeros_like(ours);
  AdamSettings s{1e-3, 0.9, 0.999, 1e-8, 1e-4};
  torch::optim::Adam torch_opt({reference}, torch::optim::AdamOptions(s.lr).betas({s.beta1, s.beta2}).eps(s.eps)
                                                .weight_decay(s.weight_decay));
  double difference = trackTorch(torch_opt, reference, ours, 50, [&](int step, torch::Tensor grad) {
    adamUpdate(spanOf(ours), spanOf(grad), spanOf(m), spanOf(v), step, s);
  });
  EXPECT_LT(difference, 1e-6);
  EXPECT_GT((ours - start).abs().max().item<double>(), 1e-3);  // the parameters did move
}

// AdamW and RMSprop through the dispatch every mode calls, so the slot
// order is checked along with the formulas.
double trackThroughDispatch(torch::optim::Optimizer& torch_opt, torch::Tensor reference, const OptimizerSettings& s,
                            double lr) {
  torch::Tensor ours = reference.detach().clone();
  std::vector<torch::Tensor> slots;
  for (int k = 0; k < slotCount(s); ++k) slots.push_back(torch::zeros_like(ours));
  const torch::Tensor start = ours.clone();
  const double difference = trackTorch(torch_opt, reference, ours, 50, [&](int step, torch::Tensor grad) {
    std::vector<std::span<float>> spans;
    for (auto& t : slots) spans.push_back(spanOf(t));
    applyOptimizer(s, lr, spanOf(ours), spanOf(grad), spans, step);
  });
  EXPECT_GT((ours - start).abs().max().item<double>(), 1e-3) << s.name << ": the parameters did move";
  return difference;
}

TEST(PsKernels, AdamWMatchesTorch) {
  for (double wd : {0.0, 1e-2, 0.5}) {
    torch::manual_seed(3);
    torch::Tensor reference = torch::randn({5003}).set_requires_grad(true);
    OptimizerSettings s;
    s.name = "adamw";
    s.weight_decay = wd;
    torch::optim::AdamW torch_opt({reference}, torch::optim::AdamWOptions(2e-3).weight_decay(wd));
    EXPECT_LT(trackThroughDispatch(torch_opt, reference, s, 2e-3), 1e-6) << "wd " << wd;
  }
}

TEST(PsKernels, RmsPropMatchesTorchInEveryVariant) {
  for (double momentum : {0.0, 0.9}) {
    for (bool centered : {false, true}) {
      for (double wd : {0.0, 1e-3}) {
        torch::manual_seed(4);
        torch::Tensor reference = torch::randn({4099}).set_requires_grad(true);
        OptimizerSettings s;
        s.name = "rmsprop";
        s.momentum = momentum;
        s.centered = centered;
        s.weight_decay = wd;
        s.alpha = 0.95;
        torch::optim::RMSprop torch_opt({reference}, torch::optim::RMSpropOptions(1e-3).alpha(0.95).momentum(momentum)
                                                         .centered(centered).weight_decay(wd));
        EXPECT_LT(trackThroughDispatch(torch_opt, reference, s, 1e-3), 1e-6)
            << "momentum " << momentum << " centered " << centered << " wd " << wd;
      }
    }
  }
}

TEST(PsKernels, SlotCountsFollowTorchsState) {
  OptimizerSettings s;
  EXPECT_EQ(slotCount(s), 0);  // sgd without momentum keeps nothing
  s.momentum = 0.9;
  EXPECT_EQ(slotCount(s), 1);
  s.name = "adamw";
  EXPECT_EQ(slotCount(s), 2);
  s.name = "rmsprop";
  s.centered = true;
  EXPECT_EQ(slotCount(s), 3);
  s.momentum = 0;
  EXPECT_EQ(slotCount(s), 2);
  std::vector<float> p(4), g(4);
  EXPECT_THROW(applyOptimizer(s, 0.1, p, g, {}, 1), Error);  // too few slots
}

TEST(PsKernels, MismatchedLengthsAreRefused) {
  std::vector<float> p(4), g(3), b(4);
  EXPECT_THROW(sgdUpdate(p, g, b, true, {}), Error);
  std::vector<float> g4(4), m(4), v(3);
  EXPECT_THROW(adamUpdate(p, g4, m, v, 1, {}), Error);
  EXPECT_THROW(rmspropUpdate(p, g4, v, {}, {}, {}), Error);
}

}  // namespace
}  // namespace tandem::optim
