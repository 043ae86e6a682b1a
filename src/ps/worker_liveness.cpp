#include "ps/worker_liveness.hpp"

#include <algorithm>

namespace tandem::ps {

LivenessVerdict WorkerLiveness::check(const std::vector<WorkerSighting>& workers, Clock::time_point now) {
  const bool stepping =
      std::any_of(workers.begin(), workers.end(), [](const WorkerSighting& w) { return w.active && w.steps_here; });
  if (stepping) {
    stepping_done_at_.reset();
  } else if (!stepping_done_at_) {
    stepping_done_at_ = now;
  }
  LivenessVerdict verdict;
  verdict.everyone_gone = true;
  for (int w = 0; w < static_cast<int>(workers.size()); ++w) {
    const WorkerSighting& s = workers[static_cast<size_t>(w)];
    if (!s.active) continue;
    if (!s.steps_here && stepping) {
      verdict.everyone_gone = false;
      continue;
    }
    const Clock::time_point heard = s.steps_here ? s.last_seen : std::max(s.last_seen, *stepping_done_at_);
    if (now - heard > timeout_ && !s.waiting) {
      verdict.lost.push_back(w);
      continue;
    }
    verdict.everyone_gone = false;
  }
  return verdict;
}

}  // namespace tandem::ps
