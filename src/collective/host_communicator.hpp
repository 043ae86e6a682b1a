#pragma once
// Hierarchical all-reduce for several workers per host: each sum goes
// first over the host's loopback, then among one worker per host (the
// first rank of its group, the host's leader) over the network, then back
// from the leader to its host-mates. A host's link carries each bucket
// once for the host, and the ring among hosts has one step per host, not
// per worker. Buffers that Gloo's flat algorithm already sums host by host
// go flat (halvingDoublingFollowsHosts). Broadcast, allgather and barrier
// run flat over every rank (they are rare: set-up, checksums, the end).
// Torch-free.
#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.hpp"

namespace tandem::collective {

// "rank 0 is worker 2, rank 1 is worker 3": Gloo's errors name ranks of a
// sub-communicator of `members`; the user knows the workers.
std::string ranksText(const std::vector<int>& members);

// Whether Gloo's flat halving-doubling already keeps each host's traffic
// local: its round k pairs ranks 2^k apart, so with a power-of-two number
// of ranks in equal power-of-two hosts of consecutive ranks, its first
// log2(g) rounds stay inside each host and the links carry the
// hierarchical bytes, in fewer serial stages. The communicator below then
// sums buffers under the ring threshold flat.
bool halvingDoublingFollowsHosts(const std::vector<std::vector<int>>& groups, int size);

// No groups: a flat Communicator::connect. Otherwise `groups` lists every
// rank of options.size exactly once, by host (as
// cluster::workersByHost gives them); options.local_host is this rank's
// network address, `loopback` the one its host-mates reach it at. Every
// rank must pass the same groups. Throws Error for groups that do not
// partition the ranks, PeerError as Communicator::connect does. Errors
// from a sum name the worker (the global rank) behind a failed peer.
std::unique_ptr<Communicator> connectByHost(gloo::rendezvous::Store& store, const CommunicatorOptions& options,
                                            const std::vector<std::vector<int>>& groups,
                                            const std::string& loopback = "127.0.0.1");

}  // namespace tandem::collective
