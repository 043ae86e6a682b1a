#pragma once
// A worker's line to its job's quorum (cluster/quorum.hpp): a thread that
// beats on its own coordinator client, so that the worker counts as alive
// while its main thread computes or waits in a collective, and keeps the
// latest view, so that the worker learns of a pending change between steps
// without a round trip of its own.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cluster/cluster_spec.hpp"
#include "cluster/quorum.hpp"
#include "net/job_security.hpp"

namespace tandem::cluster {

class QuorumLink {
 public:
  // Beats every `interval` as `worker`. A coordinator that leaves a beat
  // unanswered for `timeout` is recorded as lost (lost()); the link keeps
  // trying.
  // `host` names the process serving the coordinator, for errors.
  QuorumLink(HostPort coordinator, std::string host, const net::JobSecurity& security, int worker,
             std::chrono::milliseconds interval, std::chrono::milliseconds timeout);
  // Stops the thread (within one beat's round trip).
  ~QuorumLink();
  QuorumLink(const QuorumLink&) = delete;
  QuorumLink& operator=(const QuorumLink&) = delete;

  // Thread-safe. Whether the latest view has a round open after the
  // generation the worker knows: the members should come to the next step
  // boundary. (A view from before the worker's last round is stale.)
  bool changePending(int64_t known_generation) const;
  // Thread-safe. Why the coordinator is out of reach, if its last beat went
  // unanswered; nullopt while it answers.
  std::optional<std::string> lost() const;

 private:
  void run(HostPort coordinator, const std::string& host, net::JobSecurity security);

  const int worker_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool pending_ = false;
  int64_t generation_ = 0;  // the latest view's
  std::optional<std::string> lost_;
  std::thread thread_;
};

}  // namespace tandem::cluster
