#pragma once
// When a parameter server gives up on a silent worker: a policy over the
// time it last heard each worker, with no sockets, so that every ordering
// can be replayed in a test by passing `now`.
#include <chrono>
#include <optional>
#include <vector>

#include "core/clock.hpp"

namespace tandem::ps {

// One worker as the server sees it at a check.
struct WorkerSighting {
  Clock::time_point last_seen;
  bool active = false;      // neither done (its goodbye) nor already lost
  bool steps_here = false;  // sends this server something every step (a push, or at ps 0 its report)
  bool waiting = false;     // blocked on this server (a step wait or a held pull): silence is not death
};

struct LivenessVerdict {
  std::vector<int> lost;       // workers to give up on now, by index
  bool everyone_gone = false;  // every worker is done or lost (counting `lost`)
};

class WorkerLiveness {
 public:
  // One per start of the job (its init): nobody has been stepping yet.
  explicit WorkerLiveness(Clock::duration timeout) : timeout_(timeout) {}

  // An active worker silent for longer than the timeout, and not waiting on
  // this server, is lost. One that has nothing to send here each step
  // (hierarchical jobs push through one worker a host) is silent by design:
  // its silence counts only from when no stepping worker was at work any
  // more, so that one that died still goes, a timeout after they finish.
  LivenessVerdict check(const std::vector<WorkerSighting>& workers, Clock::time_point now);

 private:
  Clock::duration timeout_;
  std::optional<Clock::time_point> stepping_done_at_;  // when no stepping worker was active any more
};

}  // namespace tandem::ps
