#pragma once
// The training objective, chosen with --loss. Datasets give class indices;
// losses that compare against float targets (mse, bce_with_logits) take
// them one-hot over the model's outputs, and float targets as they are.
#include <torch/torch.h>

#include <functional>
#include <string>

namespace tandem::train {

// Throws InputError naming --loss and the known losses unless `name` is one
// of cross_entropy, mse, bce_with_logits or nll. Thread-safe.
void requireKnownLoss(const std::string& name);

// The batch mean of `name` (torch's default reduction) for the model's
// outputs `logits` [N, C] against `targets` ([N] class indices, or float
// targets shaped like the outputs). nll expects log-probabilities.
torch::Tensor computeLoss(const std::string& name, const torch::Tensor& logits, const torch::Tensor& targets);

// A loss as the trainer calls it: the batch mean for (outputs, targets).
using LossFunction = std::function<torch::Tensor(const torch::Tensor& outputs, const torch::Tensor& targets)>;
// computeLoss for `name`, checked now (InputError as requireKnownLoss).
LossFunction lossFunction(const std::string& name);

}  // namespace tandem::train
