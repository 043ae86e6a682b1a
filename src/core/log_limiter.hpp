#pragma once
// Rate-limited warnings for what a peer can trigger at will (bad frames,
// refused requests): the first from each peer is logged, then at most one
// line per peer per interval, carrying how many were not logged. A flood
// costs the log a line every few seconds, not a line per frame.
// Not thread-safe: one limiter per serving thread.
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/clock.hpp"

namespace tandem {

class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::milliseconds interval = std::chrono::seconds(10), size_t max_peers = 1024)
      : interval_(interval), max_peers_(max_peers) {}

  // Whether to log this event from `peer` now; when true, `suppressed` is
  // how many of its events were not logged since its last line.
  bool allow(const std::string& peer, uint64_t& suppressed, Clock::time_point now = Clock::now());

  // " (and 12 more like it from this peer in the last 10s)", or "".
  std::string suppressedText(uint64_t suppressed) const;

 private:
  struct Peer {
    Clock::time_point logged_at;
    uint64_t suppressed = 0;
  };
  std::chrono::milliseconds interval_;
  size_t max_peers_;
  std::unordered_map<std::string, Peer> peers_;
};

}  // namespace tandem
