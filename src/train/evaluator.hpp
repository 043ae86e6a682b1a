#pragma once
#include <cstdint>
#include <string>

#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "train/loss.hpp"

namespace tandem::train {

struct EvalResult {
  double accuracy = 0;  // fraction in [0, 1]
  double loss = 0;      // mean of the run's loss over the samples
  int64_t samples = 0;
};

// Evaluates on the whole dataset in order, in eval mode without gradients,
// with `loss` as training uses it (train/loss.hpp), and restores the model's
// training mode afterwards.
EvalResult evaluate(models::Model& model, const data::Dataset& dataset, int64_t batch_size,
                    const LossFunction& loss);

}  // namespace tandem::train
