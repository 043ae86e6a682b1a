#pragma once
// Which workers share a host, for hierarchical aggregation: their sums go
// over the host's loopback first, so its link carries one host's share
// instead of one per worker. Torch-free.
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

// Workers grouped by the host their address names, each group ascending,
// groups in order of their first worker. Empty when the spec lists no
// worker addresses (a launcher that names only the coordinator).
std::vector<std::vector<int>> workersByHost(const ClusterSpec& spec);

// Whether a job aggregates per host: asked for ("auto"), more than one
// host, and some host with more than one worker. On one host every worker
// already shares the machine, so there is no link to spare.
bool useHostGroups(const std::vector<std::vector<int>>& groups, const std::string& setting);

}  // namespace tandem::cluster
