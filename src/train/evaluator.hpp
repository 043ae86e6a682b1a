#pragma once
#include <cstdint>

#include "data/dataset.hpp"
#include "models/registry.hpp"

namespace tandem::train {

struct EvalResult {
  double accuracy = 0;  // fraction in [0, 1]
  double loss = 0;      // mean cross-entropy
  int64_t samples = 0;
};

// Evaluates on the whole dataset in order, in eval mode without gradients,
// and restores the model's training mode afterwards.
EvalResult evaluate(models::Model& model, const data::Dataset& dataset, int64_t batch_size);

}  // namespace tandem::train
