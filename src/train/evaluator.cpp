#include "train/evaluator.hpp"

#include <numeric>

#include "train/loss.hpp"

namespace tandem::train {

EvalResult evaluate(models::Model& model, const data::Dataset& dataset, int64_t batch_size, const LossFunction& loss) {
  torch::NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  const auto params = model.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  std::vector<int64_t> indices;
  for (int64_t start = 0; start < dataset.size(); start += batch_size) {
    int64_t n = std::min(batch_size, dataset.size() - start);
    indices.resize(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), start);
    data::Batch batch = dataset.getBatch(indices, 0);
    batch.inputs = batch.inputs.to(device);
    batch.targets = batch.targets.to(device);
    auto logits = model.forward(batch.inputs);
    // Batch means weighted by batch size: the same per-sample mean as
    // training reports, whatever the loss reduces over.
    loss_sum += loss(logits, batch.targets).item<double>() * static_cast<double>(n);
    correct += logits.argmax(1).eq(batch.targets).sum().item<int64_t>();
    result.samples += n;
  }
  if (result.samples > 0) {
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
    result.loss = loss_sum / static_cast<double>(result.samples);
  }
  model.train(was_training);
  return result;
}

}  // namespace tandem::train
