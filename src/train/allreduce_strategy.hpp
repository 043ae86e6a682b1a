#pragma once
// Synchronous data parallelism: every worker computes gradients on its slice
// of the global batch; buckets of gradients are all-reduced on a
// communication thread while backward is still running, and each worker
// applies the same mean gradient with its own optimizer.
#include <memory>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "train/config.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

class AllReduceStrategy final : public Strategy, public ReplicaCheck {
 public:
  // Nothing touches the network until initialize().
  // `context` (the job's start and security) must outlive the strategy.
  AllReduceStrategy(cluster::ClusterSpec spec, DistributedConfig config, cluster::JobContext& context);
  ~AllReduceStrategy() override;

  Mode mode() const override { return Mode::AllReduce; }
  int rank() const override;
  int worldSize() const override;
  // Starts the coordinator (chief), joins the cluster, connects Gloo,
  // broadcasts parameters and buffers from worker 0, and installs the
  // gradient hooks. Throws PeerError naming missing tasks, InputError naming
  // a fingerprint difference.
  void initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) override;
  void beforeBackward(const LocalStep& so_far, int micro_step) override;
  // With a live membership (--min-workers) a failed
  // all-reduce returns the new members (AgreedStep::membership, redo set)
  // instead of throwing, and a change agreed in the step's tail comes back
  // from afterUpdate.
  AgreedStep synchronizeGradients(torch::nn::Module& model, const LocalStep& local) override;
  SyncTimes afterUpdate(torch::nn::Module& model, AgreedStep& agreed) override;
  ReplicaCheck* replicaCheck() override { return this; }
  void verifyReplicas(torch::nn::Module& model, int64_t step) override;
  std::optional<MembershipChange> takeJoinedMembership() override;
  void finish() override;
  nlohmann::json summary() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Exact 64-bit hash of every parameter's bytes, in registration order.
uint64_t parameterChecksum(const torch::nn::Module& model);

}  // namespace tandem::train
