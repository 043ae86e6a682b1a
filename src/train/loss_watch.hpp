#pragma once
// Watches the training loss for a collapse, so that a diverging run stops
// within a few steps, saying why, instead of running to the end at chance
// accuracy: a loss that is not finite, or one whose recent mean has climbed
// back above where the run started after the run had made progress. A run
// whose loss never falls is left alone (a hard problem is not a collapse).
// Pure: the caller feeds it each step's loss. Torch-free.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace tandem::train {

struct Collapse {
  int64_t step = 0;
  bool non_finite = false;
  double start = 0;  // the mean of the first window's losses
  double best = 0;   // the lowest window mean since
  double now = 0;    // the window mean (or the loss, when not finite) at `step`
  // "the loss rose back to 2.41 (mean of the last 10 steps) at step 340,
  // above the 2.30 it started at, after reaching 0.61"
  std::string describe(int window) const;
};

class LossWatch {
 public:
  // `window` steps make a mean; a rise counts once the best mean has
  // fallen to `progress` times the start or below. `rises` false: only a
  // loss that is not finite is a collapse.
  explicit LossWatch(int window = 10, double progress = 0.7, bool rises = true);

  // This step's loss (each worker's agreed or own mean). Returns the
  // collapse it shows, if any; after one, keeps returning nullopt.
  std::optional<Collapse> observe(int64_t step, double loss);

  int window() const { return window_; }

 private:
  int window_;
  double progress_;
  bool rises_;
  std::deque<double> recent_;
  double recent_sum_ = 0;
  std::optional<double> start_;
  double best_ = 0;
  bool reported_ = false;
};

struct TrainConfig;

// What to try, for the message that stops a collapsed run: `stale`, when
// each update is one worker's push computed on older parameters (async,
// bounded staleness).
std::string collapseAdvice(const TrainConfig& config, double lr, bool stale);

}  // namespace tandem::train
