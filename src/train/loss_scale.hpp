#pragma once
// The dynamic loss scale of fp16 training, as a pure policy (torch-free):
// the loss is multiplied by scale() before backward so that small
// gradients survive float16; a step whose gradients overflowed is skipped
// and the scale halves; after `interval` clean steps in a row it doubles.
// The defaults are torch.amp.GradScaler's. Every all-reduce worker checks
// the same averaged gradients, so all of them skip the same steps.
#include <cstdint>

namespace tandem::train {

class LossScale {
 public:
  struct Options {
    double initial = 65536.0;
    double growth = 2.0;
    double backoff = 0.5;
    int64_t interval = 2000;
  };
  LossScale() : LossScale(Options{}) {}
  explicit LossScale(Options options) : options_(options), scale_(options.initial) {}

  double scale() const { return scale_; }
  // After a step's gradients were checked: whether to apply the step.
  bool update(bool found_inf) {
    if (found_inf) {
      scale_ *= options_.backoff;
      clean_ = 0;
      ++skipped_;
      return false;
    }
    if (++clean_ >= options_.interval) {
      scale_ *= options_.growth;
      clean_ = 0;
    }
    return true;
  }
  int64_t skipped() const { return skipped_; }

 private:
  Options options_;
  double scale_;
  int64_t clean_ = 0;    // clean steps since the scale last changed
  int64_t skipped_ = 0;  // steps skipped for inf/NaN gradients
};

}  // namespace tandem::train
