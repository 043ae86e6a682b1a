#include "train/loss.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace tandem::train {
namespace F = torch::nn::functional;

void requireKnownLoss(const std::string& name) {
  if (name != "cross_entropy" && name != "mse" && name != "bce_with_logits" && name != "nll") {
    throw InputError(
        fmt::format("--loss: unknown loss '{}' (use cross_entropy, mse, bce_with_logits or nll)", name));
  }
}

namespace {
// Class indices become one-hot rows over the model's outputs.
torch::Tensor floatTargets(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (targets.is_floating_point()) return targets.to(logits.dtype());
  return F::one_hot(targets, logits.size(1)).to(logits.dtype());
}
}  // namespace

torch::Tensor computeLoss(const std::string& name, const torch::Tensor& logits, const torch::Tensor& targets) {
  if (name == "cross_entropy") return F::cross_entropy(logits, targets);
  if (name == "nll") return F::nll_loss(logits, targets);
  if (name == "mse") return F::mse_loss(logits, floatTargets(logits, targets));
  if (name == "bce_with_logits") return F::binary_cross_entropy_with_logits(logits, floatTargets(logits, targets));
  requireKnownLoss(name);
  return {};
}

LossFunction lossFunction(const std::string& name) {
  requireKnownLoss(name);
  return [name](const torch::Tensor& outputs, const torch::Tensor& targets) {
    return computeLoss(name, outputs, targets);
  };
}

}  // namespace tandem::train
