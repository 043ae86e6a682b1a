#include "core/stop_request.hpp"

namespace tandem {
namespace {

// Constant-initialised, so the first use (maybe in a signal handler) takes
// no lock.
std::atomic<bool> g_stop{false};
std::atomic<bool> g_leave{false};
static_assert(std::atomic<bool>::is_always_lock_free);

}  // namespace

std::atomic<bool>& stopFlag() noexcept { return g_stop; }
std::atomic<bool>& leaveFlag() noexcept { return g_leave; }

}  // namespace tandem
