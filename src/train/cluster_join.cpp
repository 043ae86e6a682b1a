#include "train/cluster_join.hpp"

#include "cluster/membership.hpp"

namespace tandem::train {

ClusterJoin joinAsWorker(const cluster::ClusterSpec& spec, const DistributedConfig& config,
                         const nlohmann::json& fingerprint) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.rendezvous_timeout_s * 1000));
  ClusterJoin join;
  if (spec.isChief()) {
    join.server = std::make_unique<cluster::CoordinatorServer>(config.bind.empty() ? spec.coordinator.host : config.bind,
                                                               spec.coordinator.port);
  }
  join.store = std::make_unique<cluster::CoordinatorClient>(spec.coordinator, timeout);
  cluster::joinCluster(*join.store, spec, fingerprint, Deadline::after(timeout));
  return join;
}

}  // namespace tandem::train
