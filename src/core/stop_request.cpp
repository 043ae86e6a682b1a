#include "core/stop_request.hpp"

namespace tandem {
namespace {

// Constant-initialised, so the first use (maybe in a signal handler) takes
// no lock.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

}  // namespace

std::atomic<bool>& stopFlag() noexcept { return g_stop; }

}  // namespace tandem
