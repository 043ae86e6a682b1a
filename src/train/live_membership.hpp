#pragma once
// A synchronous all-reduce job whose workers may die or join while it runs
// (--min-workers): the worker's side of the quorum
// (cluster/quorum.hpp). It keeps the worker's heartbeat going, takes it
// through a round when a collective fails or a change is pending, and
// copies the model and optimizer state from the round's source to whoever
// is behind it, over the new communicator. No checkpoint is read.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/quorum.hpp"
#include "cluster/quorum_link.hpp"
#include "core/deadline.hpp"
#include "train/config.hpp"
#include "train/membership_change.hpp"

namespace tandem::train {


class LiveMembership {
 public:
  // Whether a job with a live membership is already training at the
  // coordinator `store` serves: a worker that starts now joins it
  // (join()) instead of starting with the others.
  static bool jobIsRunning(cluster::CoordinatorClient& store);
  // Said by worker 0 once every first member is connected: from then on a
  // worker that starts is a joiner.
  static void markRunning(cluster::CoordinatorClient& store);
  // Waits until the job is running (a worker beyond the list of a growing
  // job has no first start to take part in). Throws PeerError naming the
  // wait when `deadline` passes first.
  static void awaitRunning(cluster::CoordinatorClient& store, const cluster::ClusterSpec& spec, Deadline deadline);

  // Starts the heartbeat. `options`: quorumOptions of the run's flags.
  // `store` (the join's client) must outlive this; it is used only from
  // the caller's thread.
  LiveMembership(const cluster::ClusterSpec& spec, const cluster::QuorumOptions& options,
                 cluster::CoordinatorClient& store, const net::JobSecurity& security);
  ~LiveMembership();

  const cluster::Membership& current() const { return current_; }
  int rank() const { return *current_.rankOf(worker_); }
  int size() const { return current_.size(); }
  // Whether the quorum has a round open: the members meet at the next step boundary.
  bool changePending() const { return link_->changePending(current_.generation); }

  // Comes to the step boundary with `steps_done` and waits for the next
  // generation. Throws PeerError when the job cannot go on (fewer than
  // --min-workers; this worker left out; the coordinator gone), naming the
  // workers and why.
  const cluster::Membership& agree(int64_t steps_done, const std::string& why);
  // Leaves the job at this step boundary (SIGUSR2), which the others, met
  // there, go on without: tells the quorum and throws Departed.
  [[noreturn]] void leave(int64_t steps_done);
  // A worker (re)started into the running job: arrives with no state and
  // waits until a generation takes it in. Throws PeerError naming what it
  // waited for when none does within the round's budget, or when the job stops.
  const cluster::Membership& join();

 private:
  int worker_;
  cluster::QuorumOptions options_;
  // How long one call to the coordinator may take: a heartbeat timeout, 1 s at least.
  std::chrono::milliseconds callBudget() const {
    return std::max<std::chrono::milliseconds>(std::chrono::seconds(1), options_.heartbeat_timeout);
  }
  // Waits for views until `admitted` holds or the job stops; `what` names the wait.
  cluster::QuorumView awaitView(cluster::QuorumView view, const std::function<bool(const cluster::QuorumView&)>& admitted,
                                const std::string& what);

  cluster::CoordinatorClient& store_;
  cluster::Membership current_;
  std::unique_ptr<cluster::QuorumLink> link_;
};

// The source's model (parameters, buffers) and optimizer state, sent to
// every member of the new generation through `broadcast`.
void healFromSource(torch::nn::Module& model, torch::optim::Optimizer* optimizer, bool is_source,
                    const std::function<void(void* data, size_t bytes)>& broadcast);

}  // namespace tandem::train
