#include "launch/failure_policy.hpp"

namespace tandem::launch {

bool FailurePolicy::spares(const ChildExit& e, int restarts) const {
  if (!isWorker(e)) return false;
  return e.name != "worker 0" || kind_.live || (kind_.chief_comes_back && restarts < kind_.max_restarts);
}

bool FailurePolicy::stopsJob(const ChildExit& e, int restarts) const {
  return failed(e) && !(kind_.carry_on && spares(e, restarts)) && !(kind_.replicated && isServer(e));
}

FailurePolicy::Replacement FailurePolicy::replaces(const ChildExit& e, int restarts, bool ending,
                                                   bool forwarded) const {
  if (forwarded || !failed(e) || badInput(e) || restarts >= kind_.max_restarts) return Replacement::kNone;
  if (kind_.servers_come_back && isServer(e) && !ending) return Replacement::kServer;
  if ((kind_.elastic_ps || kind_.live) && spares(e, restarts)) return Replacement::kWorker;
  return Replacement::kNone;
}

}  // namespace tandem::launch
