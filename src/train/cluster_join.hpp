#pragma once
// A worker's way into the cluster: worker 0 serves the coordinator store
// (unless launch does: --external-coordinator), everyone joins through it
// and checks the run fingerprints agree.
#include <nlohmann/json.hpp>

#include <memory>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "cluster/coordinator.hpp"
#include "train/config.hpp"

namespace tandem::train {

struct ClusterJoin {
  std::unique_ptr<cluster::CoordinatorServer> server;  // worker 0's, when it serves the store
  std::unique_ptr<cluster::CoordinatorClient> store;
};

// Throws PeerError naming tasks that never arrived within
// --rendezvous-timeout, InputError naming a fingerprint difference.
// Records in `context` the start it joined.
ClusterJoin joinAsWorker(const cluster::ClusterSpec& spec, const DistributedConfig& config,
                         const nlohmann::json& fingerprint, cluster::JobContext& context);

// A sync PS worker (not the chief) started again by the user's own command
// while its job runs: the running start's store already counts it, and no
// --restart-wait asked for a restart from the checkpoint. Marks `context`'s
// start as joining the running job (and by hand), as launch's replacements
// are, before the run reads a checkpoint. Not in DiLoCo, whose steps are
// rounds, nor with host sums, where its host's other workers wait for it.
void noticeJoinByHand(const cluster::ClusterSpec& spec, const DistributedConfig& config, cluster::JobContext& context);

}  // namespace tandem::train
