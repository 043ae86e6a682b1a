#include "train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace tandem::train {

LrSchedule::LrSchedule(OptimizerConfig optimizer, LrScheduleConfig config, int64_t steps_per_epoch,
                       int64_t total_steps, double scale)
    : base_lr_(optimizer.lr), config_(std::move(config)), steps_per_epoch_(steps_per_epoch), total_steps_(total_steps) {
  if (config_.scaling == LrScaling::kLinear) {
    if (!(scale >= 1.0)) throw InputError(fmt::format("--lr-scaling: scale factor must be >= 1, got {}", scale));
    scale_ = scale;
    warmup_start_ = 1.0 / scale;
  }
  if (config_.kind == LrScheduleKind::kPiecewise) {
    if (config_.values.size() != config_.boundaries.size() + 1) {
      throw InputError(fmt::format("--lr-values: piecewise needs {} values for {} boundaries, got {}",
                                   config_.boundaries.size() + 1, config_.boundaries.size(), config_.values.size()));
    }
    for (size_t i = 0; i < config_.boundaries.size(); ++i) {
      if (config_.boundaries[i] <= 0 || (i > 0 && config_.boundaries[i] <= config_.boundaries[i - 1])) {
        throw InputError("--lr-boundaries: boundaries must be positive and strictly increasing");
      }
    }
  }
  if (config_.warmup_steps < 0) throw InputError("--warmup-steps: must be >= 0");
  if (steps_per_epoch_ <= 0) throw InputError("lr schedule: steps per epoch must be positive");
}

double LrSchedule::base(int64_t step) const {
  if (config_.kind == LrScheduleKind::kPiecewise) {
    int64_t position = config_.unit == LrUnit::kEpoch ? step / steps_per_epoch_ : step;
    auto it = std::upper_bound(config_.boundaries.begin(), config_.boundaries.end(), position);
    return config_.values[static_cast<size_t>(it - config_.boundaries.begin())];
  }
  if (config_.kind == LrScheduleKind::kCosine) {
    int64_t span = std::max<int64_t>(1, total_steps_ - config_.warmup_steps);
    double t = std::clamp(static_cast<double>(step - config_.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
    return config_.min_lr + 0.5 * (base_lr_ - config_.min_lr) * (1.0 + std::cos(std::numbers::pi * t));
  }
  return base_lr_;
}

double LrSchedule::at(int64_t step) const {
  double lr = base(step) * scale_;
  if (step < config_.warmup_steps) {
    double progress = static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps);
    lr *= warmup_start_ + (1.0 - warmup_start_) * progress;
  }
  return lr;
}

}  // namespace tandem::train
