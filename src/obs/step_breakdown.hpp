#pragma once
// Accumulates where each training step's time went. The phases partition a
// step, so their means add up to the mean step time.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string_view>

namespace tandem::obs {

enum class Phase : int {
  kInputWait = 0,      // waiting for the prefetcher
  kForwardBackward,    // forward, loss and backward
  kExposedComm,        // communication not hidden behind compute
  kWaitWorkers,        // waiting for slower workers (stragglers)
  kUpdate,             // optimizer step and LR update
  kCount
};

std::string_view phaseName(Phase phase);

// Not thread-safe: owned by the training thread.
class StepBreakdown {
 public:
  void add(Phase phase, double seconds) { totals_[static_cast<int>(phase)] += seconds; }
  void endStep() { ++steps_; }
  int64_t steps() const { return steps_; }
  double total(Phase phase) const { return totals_[static_cast<int>(phase)]; }
  double meanSeconds(Phase phase) const;
  double meanStepSeconds() const;
  // {"input_wait": s, "forward_backward": s, ..., "step": s}: mean seconds per step.
  nlohmann::json toJson() const;
  void reset();

 private:
  std::array<double, static_cast<int>(Phase::kCount)> totals_{};
  int64_t steps_ = 0;
};

}  // namespace tandem::obs
