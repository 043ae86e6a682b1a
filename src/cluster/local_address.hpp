#pragma once
// The address peers should use to reach this process, when the cluster spec
// does not list it (launcher environments give only rank and size).
#include <string>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

// The local IP the kernel would route `peer` through (a UDP connect, which
// sends nothing). Throws Error naming `peer` if it cannot be resolved.
std::string localAddressToward(const HostPort& peer);

// A numeric address ZeroMQ can bind for `host`: the host itself if it is an
// IPv4/IPv6 literal, otherwise "*" (every interface).
std::string bindableAddress(const std::string& host);

// Resolves every host the spec names (worker and PS lists, coordinator), so
// a typo fails at once instead of as a rendezvous timeout minutes later.
// Throws InputError naming the host and where it came from (the flag,
// TF_CONFIG field or environment variable).
void requireResolvableHosts(const ClusterSpec& spec);

}  // namespace tandem::cluster
