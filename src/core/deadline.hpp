#pragma once
// A point in time by which a wait must end. Passed down instead of raw
// timeouts so that nested waits share one budget.
#include <algorithm>
#include <chrono>

#include "core/clock.hpp"

namespace tandem {

class Deadline {
 public:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  static Deadline after(std::chrono::milliseconds budget) { return Deadline(Clock::now() + budget); }
  static Deadline afterSeconds(double seconds) {
    return after(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0)));
  }

  // This deadline, or `floor` from now if that is later: a request that
  // starts just before its deadline still gets time for one round trip, so
  // an absent answer is reported as absent, not as a silent peer.
  Deadline atLeast(std::chrono::milliseconds floor) const { return Deadline(std::max(at_, Clock::now() + floor)); }

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  // Time left, never negative.
  std::chrono::milliseconds remaining() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

 private:
  Clock::time_point at_;
};

}  // namespace tandem
