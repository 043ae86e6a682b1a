#include "cluster/quorum_link.hpp"

#include <string>

#include "cluster/coordinator.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"

namespace tandem::cluster {

QuorumLink::QuorumLink(HostPort coordinator, std::string host, const net::JobSecurity& security, int worker,
                       std::chrono::milliseconds interval, std::chrono::milliseconds timeout)
    : worker_(worker), interval_(interval), timeout_(timeout) {
  thread_ = std::thread([this, coordinator = std::move(coordinator), host = std::move(host), security] {
    run(coordinator, host, security);
  });
}

QuorumLink::~QuorumLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool QuorumLink::changePending(int64_t known_generation) const {
  std::lock_guard lock(mu_);
  return pending_ && generation_ >= known_generation;
}

std::optional<std::string> QuorumLink::lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

void QuorumLink::run(HostPort coordinator, const std::string& host, net::JobSecurity security) {
  CoordinatorClient client(std::move(coordinator), timeout_, security, host);
  auto answered = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    std::optional<bool> pending;
    int64_t generation = 0;
    std::string failure;
    try {
      // One interval per beat, so that stopping waits at most that long.
      const QuorumView view = client.quorumBeat(worker_, Deadline::after(interval_));
      pending = view.round_open || view.stopped.has_value();
      generation = view.current.generation;
      answered = std::chrono::steady_clock::now();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    if (pending) {
      pending_ = *pending;
      generation_ = generation;
      lost_.reset();
    } else if (std::chrono::steady_clock::now() - answered > timeout_) {
      lost_ = failure;
    }
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace tandem::cluster
