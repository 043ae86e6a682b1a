#pragma once
// Builds the worker-side torch optimizer from config and sets its rate.
#include <torch/torch.h>

#include <memory>

#include "train/config.hpp"

namespace tandem::train {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const OptimizerConfig& config,
                                                       std::vector<torch::Tensor> parameters);

// Sets the learning rate of every parameter group. Not thread-safe.
void setLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace tandem::train
