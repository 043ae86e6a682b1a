#pragma once
// Hierarchical all-reduce for several workers per host: each sum goes
// first over the host's loopback (HostMates, in rank order), then among one
// worker per host (the first rank of its group, the host's leader) over the
// network, then back from the leader to its host-mates. A host's link carries each bucket
// once for the host, and the ring among hosts has one step per host, not
// per worker. Broadcast, allgather and barrier run flat over every rank
// (they are rare: set-up, checksums, the end).
#include <memory>
#include <string>
#include <vector>

#include "cluster/kv_store.hpp"
#include "collective/communicator.hpp"

namespace tandem::collective {

// No groups: a flat Communicator::connect. Otherwise `groups` lists every
// rank of options.size exactly once, by host (as
// cluster::workersByHost gives them); options.local_host is this rank's
// network address, `loopback` the one its host-mates reach it at. Every
// rank must pass the same groups. Throws Error for groups that do not
// partition the ranks, PeerError as Communicator::connect does. Errors
// from a sum name the worker (the global rank) behind a failed peer.
std::unique_ptr<Communicator> connectByHost(cluster::KeyValueStore& store, const CommunicatorOptions& options,
                                            const std::vector<std::vector<int>>& groups,
                                            const std::string& loopback = "127.0.0.1");

}  // namespace tandem::collective
