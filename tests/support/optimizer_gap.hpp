#pragma once
// The multi-tensor optimizer step against the CPU kernels, for the CPU and
// the GPU tests alike.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "train/fused_step.hpp"
#include "train/multi_tensor_step.hpp"

namespace tandem::testing {

inline train::OptimizerConfig configFor(const std::string& name, double momentum, bool nesterov, double weight_decay) {
  train::OptimizerConfig c;
  static_cast<optim::OptimizerSettings&>(c) = optim::optimizerDefaults(name);
  c.name = name;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = weight_decay;
  return c;
}

// Two copies of one small model; returns the largest relative difference of
// their parameters (infinity for a NaN) after `steps` updates on the same
// gradients: the first on the CPU through the CPU kernels, the second on
// `device` through the multi-tensor kernels.
inline double gapAfter(const torch::Device& device, const train::OptimizerConfig& c, int steps) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> a = {torch::randn({5, 3}), torch::randn({7}), torch::randn({2, 3, 3, 3})};
  std::vector<torch::Tensor> b;
  for (auto& t : a) {
    t.requires_grad_(true);
    b.push_back(t.detach().to(device, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true).requires_grad_(true));
  }
  torch::optim::SGD opt_a(a, torch::optim::SGDOptions(0.1));  // the type only holds state; the kernels step
  torch::optim::SGD opt_b(b, torch::optim::SGDOptions(0.1));
  double gap = 0;
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < a.size(); ++i) {
      const torch::Tensor g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.to(device);
    }
    train::fusedOptimizerStep(opt_a, c, 0.01);
    EXPECT_TRUE(train::multiTensorStep(opt_b, c, 0.01)) << c.name;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::isfinite(b[i]).all().item<bool>()) << c.name << ": parameter " << i << " is not finite";
    const double relative = ((a[i] - b[i].cpu()).abs().max() / a[i].abs().max()).item<double>();
    gap = std::isnan(relative) ? std::numeric_limits<double>::infinity() : std::max(gap, relative);
  }
  return gap;
}

}  // namespace tandem::testing
