#pragma once
// A process-wide request to stop, set by `tandem train`'s SIGINT/SIGTERM
// handler. The trainer stops after its current step; waits that would
// otherwise last until their timeout (the rendezvous, a server waiting for
// its chief) give up at once with Interrupted.
#include <atomic>

namespace tandem {

// The flag itself: lock-free, so the signal handler may set it.
std::atomic<bool>& stopFlag() noexcept;
inline bool stopRequested() noexcept { return stopFlag().load(std::memory_order_relaxed); }

// A request for this one worker to leave a live job (SIGUSR2: launch sends
// it when the discovery script lists fewer slots), which the others go on
// without. Lock-free, like the stop flag.
std::atomic<bool>& leaveFlag() noexcept;
inline bool leaveRequested() noexcept { return leaveFlag().load(std::memory_order_relaxed); }

}  // namespace tandem
