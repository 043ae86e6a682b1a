#pragma once
// Learning rate as a pure function of the global step, so that a resumed or
// distributed run computes exactly the same rate as a continuous one.
#include <cstdint>

#include "train/config.hpp"

namespace tandem::train {

class LrSchedule {
 public:
  // total_steps: the run's planned length (the cosine horizon).
  // scale: the linear-scaling factor (workers x accumulate) when
  // config.scaling is "linear"; ignored otherwise.
  // Throws InputError for an inconsistent config (e.g. piecewise values vs boundaries).
  LrSchedule(OptimizerConfig optimizer, LrScheduleConfig config, int64_t steps_per_epoch, int64_t total_steps,
             double scale = 1.0);

  // Rate for the update made at global step `step` (0-based).
  double at(int64_t step) const;

 private:
  double base(int64_t step) const;

  double base_lr_;
  double scale_ = 1.0;
  double warmup_start_ = 0.0;  // fraction of the rate warmup starts from
  LrScheduleConfig config_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
};

}  // namespace tandem::train
