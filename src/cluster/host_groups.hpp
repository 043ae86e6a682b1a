#pragma once
// Which workers share a host, for hierarchical aggregation: their sums go
// over the host's loopback first, so its link carries one host's share
// instead of one per worker. Torch-free.
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/host_aggregation.hpp"
#include "core/deadline.hpp"

namespace tandem::cluster {

// Workers grouped by their address, each group ascending, groups in order
// of their first worker.
std::vector<std::vector<int>> groupByAddress(const std::vector<std::string>& addresses);

// The same for the workers a spec lists. Empty when it lists no worker
// addresses (a launcher that names only the coordinator: see below).
std::vector<std::vector<int>> workersByHost(const ClusterSpec& spec);

// Under torchrun, mpirun or srun only the coordinator is named, so each
// worker publishes the address it reaches the coordinator from (one per
// host, for all its workers) and reads everyone's. Call after every worker
// joined. Returns the addresses by rank; throws PeerError naming the
// workers whose address did not arrive by `deadline` (Interrupted on a
// stop request). Waits as the rendezvous does (awaitKeys).
std::vector<std::string> exchangeWorkerAddresses(CoordinatorClient& store, int rank, int size,
                                                 const std::string& mine, Deadline deadline);

// A live job's members change, so each worker publishes the address its
// peers reach it at (before it joins or is taken in), and every member
// groups the generation's workers from what they published.
void publishWorkerAddress(CoordinatorClient& store, int worker, const std::string& address, Deadline deadline);

// Ranks grouped by host for a generation whose members are `workers` (ids,
// in rank order), read from what each published. Throws PeerError naming
// the workers whose address did not arrive by `deadline`.
std::vector<std::vector<int>> memberHostGroups(CoordinatorClient& store, const std::vector<int>& workers,
                                               HostAggregation setting, Deadline deadline);

// Whether a job aggregates per host: asked for ("auto"), more than one
// host, and some host with more than one worker. On one host every worker
// already shares the machine, so there is no link to spare.
bool useHostGroups(const std::vector<std::vector<int>>& groups, HostAggregation setting);

// The groups a job with `setting` (--hierarchical auto|off) sums by host
// in, or none: from the spec's worker addresses, or, when it lists none,
// by exchanging `address` (this worker's, as its peers reach it) through
// `store` within `deadline`. Every worker must call it, after joining.
std::vector<std::vector<int>> hostGroupsFor(const ClusterSpec& spec, HostAggregation setting,
                                            CoordinatorClient& store, const std::string& address, Deadline deadline);

}  // namespace tandem::cluster
