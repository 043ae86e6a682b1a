#pragma once
// One way to wait: every wait has a deadline, and a wait that runs long
// says so, naming what it waits for, well before it gives up (the tier
// Horovod's stall inspector adds before anything dies).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "core/deadline.hpp"
#include "core/logging.hpp"

namespace tandem {

// "850ms", "3s", "2.5s".
std::string formatDuration(std::chrono::milliseconds duration);

// When a long wait warns: first at the earlier of `first` and half its
// budget, then every `repeat`.
struct StallWarning {
  std::chrono::milliseconds first{10'000};
  std::chrono::milliseconds repeat{30'000};
};

// Waits on `cv` (holding `lock`) until `ready()` or `deadline`. While it
// waits longer than the warning tier allows, logs "still waiting for
// <what()> after 10s (gives up in 1m50s)". Returns ready(). Thread-safe as
// the condition variable is.
template <class Ready>
bool waitWithStallWarnings(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline,
                           Ready ready, const std::function<std::string()>& what, StallWarning warning = {}) {
  const auto started = Clock::now();
  const auto budget = deadline.at() - started;
  auto warn_at = started + std::min<Clock::duration>(warning.first, budget / 2);
  while (true) {
    const auto until = std::min(deadline.at(), warn_at);
    if (cv.wait_until(lock, until, ready)) return true;
    const auto now = Clock::now();
    if (now >= deadline.at()) return false;
    if (now >= warn_at) {
      TANDEM_LOG_WARN("still waiting for {} after {} (gives up in {})", what(),
                      formatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(now - started)),
                      formatDuration(deadline.remaining()));
      warn_at += warning.repeat;
    }
  }
}

}  // namespace tandem
