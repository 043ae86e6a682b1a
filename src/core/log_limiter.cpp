#include "core/log_limiter.hpp"

#include <fmt/format.h>

#include "core/patient_wait.hpp"

namespace tandem {

bool LogLimiter::allow(const std::string& peer, uint64_t& suppressed, Clock::time_point now) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    // Bounded memory against peers that change address: start afresh.
    if (peers_.size() >= max_peers_) peers_.clear();
    peers_.emplace(peer, Peer{now, 0});
    suppressed = 0;
    return true;
  }
  Peer& p = it->second;
  if (now - p.logged_at < interval_) {
    ++p.suppressed;
    return false;
  }
  suppressed = p.suppressed;
  p.suppressed = 0;
  p.logged_at = now;
  return true;
}

std::string LogLimiter::suppressedText(uint64_t suppressed) const {
  if (suppressed == 0) return "";
  return fmt::format(" (and {} more from this peer not logged, at most one line per {})", suppressed,
                     formatDuration(interval_));
}

}  // namespace tandem
