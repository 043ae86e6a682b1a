#pragma once
// The run's model, shaped for the dataset it trains or evaluates on.
#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "train/config.hpp"

namespace tandem::train {

// Builds config.model for the dataset's sample shape and class count, with
// the current torch seed. Throws InputError as models::createModel does.
inline models::ModelPtr createModelFor(const TrainConfig& config, const data::Dataset& dataset) {
  auto shape = dataset.shape();
  return models::createModel(config.model, {shape.channels, shape.height, shape.width, dataset.numClasses()},
                             config.model_options);
}

}  // namespace tandem::train
