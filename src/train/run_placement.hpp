#pragma once
// Where, and in what precision, a run trains: the flags whose checks need
// the device and the strategy, made before anything is written.
#include <string>

#include "models/registry.hpp"
#include "train/config.hpp"
#include "train/device.hpp"
#include "train/mixed_precision.hpp"

namespace tandem::train {

struct RunPlacement {
  TrainingDevice device;
  Amp amp = Amp::kOff;
};

// A model the caller brings (the C++ API) stays on its own device; emulated
// compute runs no real forward, so it stays on the CPU; otherwise --device
// decides. Throws InputError for what cannot apply here: channels-last
// with parameter servers, fp16 where parameter servers apply the update or
// on the CPU.
RunPlacement placeRun(const TrainConfig& c, const models::Model& model, bool supplied, bool emulated,
                      Mode mode, bool strategy_applies_update, const Environment& env);

}  // namespace tandem::train
