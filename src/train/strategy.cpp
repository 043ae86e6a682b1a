#include "train/strategy.hpp"

namespace tandem::train {

AgreedStep averageMicroBatches(torch::nn::Module& model, const LocalStep& local) {
  if (local.micro_steps > 1) {
    // Gradients of micro-batch means were summed; the update wants their mean.
    const double scale = 1.0 / local.micro_steps;
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters()) {
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
    }
  }
  AgreedStep agreed;
  agreed.loss = local.loss_sum / local.micro_steps;
  agreed.stop = local.stop_requested;
  return agreed;
}

}  // namespace tandem::train
