#pragma once
// One way to wait: every wait has a deadline, and a wait that runs long
// says so, naming what it waits for, well before it gives up (the tier
// Horovod's stall inspector adds before anything dies).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "core/deadline.hpp"
#include "core/logging.hpp"
#include "core/stop_request.hpp"

namespace tandem {

// "850ms", "3s", "2.5s".
std::string formatDuration(std::chrono::milliseconds duration);

// When a long wait warns: first at the earlier of `first` and half its
// budget, then every `repeat`.
struct StallWarning {
  std::chrono::milliseconds first{10'000};
  std::chrono::milliseconds repeat{30'000};
};

// Once the process is asked to stop (core/stop_request), a wait lasts at
// most this much longer: a step that is about to finish still does (and the
// run leaves its checkpoint), one blocked on a silent peer ends well inside
// a launcher's SIGTERM-to-SIGKILL grace.
inline constexpr std::chrono::milliseconds kStopGrace{2'000};
// How often a wait looks at the stop request.
inline constexpr std::chrono::milliseconds kStopPoll{100};

// Waits on `cv` (holding `lock`) until `ready()` or `deadline`, or kStopGrace
// after a stop request. While it waits longer than the warning tier allows,
// logs "still waiting for <what()> after 10s (gives up in 1m50s)". Returns
// ready(); when false, stopRequested() tells a stop from a timeout.
// `meanwhile`, if any, runs without the lock every kStopPoll while it waits:
// what the answer may depend on that only the waiting thread can do.
// Thread-safe as the condition variable is.
template <class Ready>
bool waitWithStallWarnings(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline,
                           Ready ready, const std::function<std::string()>& what, StallWarning warning = {},
                           const std::function<void()>& meanwhile = {}) {
  const auto started = Clock::now();
  const auto budget = deadline.at() - started;
  auto warn_at = started + std::min<Clock::duration>(warning.first, budget / 2);
  auto give_up = deadline.at();
  bool stopping = false;
  while (true) {
    const auto until = std::min({give_up, warn_at, Clock::now() + Clock::duration(kStopPoll)});
    if (cv.wait_until(lock, until, ready)) return true;
    if (meanwhile) {
      lock.unlock();
      meanwhile();
      lock.lock();
      if (ready()) return true;
    }
    const auto now = Clock::now();
    if (!stopping && stopRequested()) {
      stopping = true;
      give_up = std::min(give_up, now + Clock::duration(kStopGrace));
    }
    if (now >= give_up) return false;
    if (now >= warn_at) {
      TANDEM_LOG_WARN("still waiting for {} after {} (gives up in {})", what(),
                      formatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(now - started)),
                      formatDuration(deadline.remaining()));
      warn_at += warning.repeat;
    }
  }
}

}  // namespace tandem
