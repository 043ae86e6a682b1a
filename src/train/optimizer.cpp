#include "train/optimizer.hpp"

#include "core/error.hpp"

namespace tandem::train {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const OptimizerConfig& c, std::vector<torch::Tensor> params) {
  if (c.name == "sgd") {
    auto options = torch::optim::SGDOptions(c.lr).momentum(c.momentum).nesterov(c.nesterov).weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::SGD>(std::move(params), options);
  }
  if (c.name == "adam") {
    auto options = torch::optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::Adam>(std::move(params), options);
  }
  if (c.name == "adamw") {
    auto options = torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::AdamW>(std::move(params), options);
  }
  if (c.name == "rmsprop") {
    auto options = torch::optim::RMSpropOptions(c.lr).alpha(c.alpha).eps(c.eps).weight_decay(c.weight_decay)
                       .momentum(c.momentum).centered(c.centered);
    return std::make_unique<torch::optim::RMSprop>(std::move(params), options);
  }
  throw InputError(fmt::format("--optimizer: unknown optimizer '{}' (use sgd, adam, adamw or rmsprop)", c.name));
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace tandem::train
