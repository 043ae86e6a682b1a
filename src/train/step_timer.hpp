#pragma once
// A training step's phases as the step breakdown and the timeline record
// them: each phase's seconds go to the breakdown, each span to the
// timeline's loop lane (when there is a timeline).
#include <nlohmann/json.hpp>

#include <string>

#include "core/clock.hpp"
#include "obs/step_breakdown.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {

class StepTimer {
 public:
  StepTimer(obs::StepBreakdown& breakdown, obs::Timeline* timeline)
      : breakdown_(breakdown), timeline_(timeline), start_us_(obs::Timeline::nowUs()), mark_us_(start_us_) {}

  // Seconds since the last lap (or the step's start).
  double lap() { return phase_.lap(); }
  void add(obs::Phase phase, double seconds) { breakdown_.add(phase, seconds); }
  // A span from the last one's end to now.
  void span(const char* name, nlohmann::json args = nullptr) {
    if (!timeline_) return;
    const int64_t now = obs::Timeline::nowUs();
    timeline_->span(name, obs::Lane::kLoop, mark_us_, now, std::move(args));
    mark_us_ = now;
  }
  // The whole step, as the job counts it.
  void spanStep(int64_t step) const {
    if (timeline_) timeline_->span("step " + std::to_string(step), obs::Lane::kLoop, start_us_, obs::Timeline::nowUs());
  }
  obs::Timeline* timeline() const { return timeline_; }

 private:
  obs::StepBreakdown& breakdown_;
  obs::Timeline* timeline_;
  Stopwatch phase_;
  int64_t start_us_;
  int64_t mark_us_;
};

}  // namespace tandem::train
