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

}  // namespace tandem
