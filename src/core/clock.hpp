#pragma once
// Monotonic time helpers shared by step timing and deadlines.
#include <chrono>

namespace tandem {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Measures elapsed seconds from construction or the last lap().
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  double elapsed() const { return secondsSince(start_); }
  double lap() {
    auto now = Clock::now();
    double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  Clock::time_point start_;
};

}  // namespace tandem
