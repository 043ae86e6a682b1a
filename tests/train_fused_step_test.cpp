#include "train/fused_step.hpp"

#include <gtest/gtest.h>

#include "train/optimizer.hpp"

namespace tandem::train {
namespace {

// A few tensors of awkward sizes, one larger than a kernel slice.
std::vector<torch::Tensor> freshParameters() {
  torch::manual_seed(3);
  return {torch::randn({3, 5}), torch::randn({70001}), torch::randn({1})};
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.clone().set_requires_grad(true));
  return out;
}

// Runs `steps` updates on the same gradients with torch::optim and with the
// fused kernels (switching to torch::optim for the last `torch_tail` fused
// steps, which must pick up the fused state), and returns the largest
// relative parameter difference.
double difference(const OptimizerConfig& config, int steps, int torch_tail = 0) {
  auto base = freshParameters();
  auto a = clones(base);
  auto b = clones(base);
  auto reference = makeOptimizer(config, a);
  auto fused = makeOptimizer(config, b);
  for (int t = 0; t < steps; ++t) {
    const double lr = config.lr * (t < steps / 2 ? 1.0 : 0.5);
    setLearningRate(*reference, lr);
    setLearningRate(*fused, lr);
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference->step();
    if (t >= steps - torch_tail) {
      fused->step();
    } else {
      fusedOptimizerStep(*fused, config, lr);
    }
  }
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, ((a[i] - b[i]).norm() / a[i].norm()).item<double>());
  }
  return worst;
}

TEST(FusedStep, MatchesTorchSgdInEveryVariant) {
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.05;
  for (double momentum : {0.0, 0.9}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0) continue;
      for (double wd : {0.0, 1e-3}) {
        c.momentum = momentum;
        c.nesterov = nesterov;
        c.weight_decay = wd;
        EXPECT_LT(difference(c, 12), 1e-6) << "momentum " << momentum << " nesterov " << nesterov << " wd " << wd;
      }
    }
  }
}

TEST(FusedStep, MatchesTorchAdam) {
  OptimizerConfig c;
  c.name = "adam";
  c.lr = 1e-3;
  for (double wd : {0.0, 1e-2}) {
    c.weight_decay = wd;
    EXPECT_LT(difference(c, 12), 1e-6) << "wd " << wd;
  }
}

TEST(FusedStep, MatchesTorchAdamW) {
  OptimizerConfig c;
  c.name = "adamw";
  c.lr = 1e-3;
  for (double wd : {0.0, 1e-2}) {
    c.weight_decay = wd;
    EXPECT_LT(difference(c, 12), 1e-6) << "wd " << wd;
    EXPECT_LT(difference(c, 10, /*torch_tail=*/4), 1e-6) << "wd " << wd << ", torch continuing";
  }
}

TEST(FusedStep, MatchesTorchRmsPropInEveryVariant) {
  OptimizerConfig c;
  c.name = "rmsprop";
  c.lr = 1e-3;
  for (double momentum : {0.0, 0.9}) {
    for (bool centered : {false, true}) {
      c.momentum = momentum;
      c.centered = centered;
      c.weight_decay = centered ? 1e-3 : 0.0;
      EXPECT_LT(difference(c, 12), 1e-6) << "momentum " << momentum << " centered " << centered;
      EXPECT_LT(difference(c, 10, /*torch_tail=*/4), 1e-6)
          << "momentum " << momentum << " centered " << centered << ", torch continuing";
    }
  }
}

TEST(FusedStep, KeepsTorchsStateFormatSoTorchCanContinue) {
  OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9;
  EXPECT_LT(difference(sgd, 10, /*torch_tail=*/4), 1e-6);
  OptimizerConfig adam;
  adam.name = "adam";
  adam.lr = 1e-3;
  EXPECT_LT(difference(adam, 10, /*torch_tail=*/4), 1e-6);
  // And the difference check itself can fail: a wrong rate is caught.
  OptimizerConfig wrong = adam;
  auto base = freshParameters();
  auto a = clones(base);
  auto opt = makeOptimizer(wrong, a);
  for (auto& p : a) p.mutable_grad() = torch::ones_like(p);
  auto before = a[0].clone();
  fusedOptimizerStep(*opt, wrong, 0.0);
  EXPECT_TRUE(torch::equal(before, a[0])) << "a zero rate moves nothing";
}

}  // namespace
}  // namespace tandem::train
