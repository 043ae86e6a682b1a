#pragma once
// The address peers should use to reach this process, when the cluster spec
// does not list it (launcher environments give only rank and size).
#include <string>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

// The local IP the kernel would route `peer` through (a UDP connect, which
// sends nothing). Throws Error naming `peer` if it cannot be resolved.
std::string localAddressToward(const HostPort& peer);

// The host this worker's collectives listen on: its own in the worker
// list, or, when the spec lists none for it (a launcher's environment, or
// a worker beyond the list of a growing job), the host its launcher placed
// it on, else the address toward the coordinator.
std::string ownWorkerHost(const ClusterSpec& spec);

// A numeric address ZeroMQ can bind for `host`: the host itself if it is an
// IPv4/IPv6 literal (0.0.0.0 or "*": every interface, only when asked for),
// otherwise the address the name resolves to that belongs to this machine
// (IPv4 first). Never every interface for a name: a port meant for the job
// should not listen on interfaces the job does not use. Throws InputError
// when the name does not resolve or resolves only to other machines.
std::string bindableAddress(const std::string& host);

// Resolves every host the spec names (worker and PS lists, coordinator), so
// a typo fails at once instead of as a rendezvous timeout minutes later.
// Throws InputError naming the host and where it came from (the flag,
// TF_CONFIG field or environment variable).
void requireResolvableHosts(const ClusterSpec& spec);

}  // namespace tandem::cluster
