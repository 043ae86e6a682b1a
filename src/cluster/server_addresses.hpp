#pragma once
// Where a launcher's parameter servers listen (--ps K under srun, mpirun or
// torchrun): no list names them ahead, so each binds a free port and
// publishes host:port in the coordinator's store, and the workers read them
// there before they connect. Torch-free.
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/coordinator.hpp"
#include "core/deadline.hpp"

namespace tandem::cluster {

// Server `server` listens at `address`.
void publishServerAddress(CoordinatorClient& store, int server, const HostPort& address, Deadline deadline);

// The `servers` addresses, by index, once all were published. Throws
// PeerError naming the servers that published none by the deadline, or
// Interrupted on a stop request; InputError for a value that is no host:port.
std::vector<HostPort> readServerAddresses(CoordinatorClient& store, int servers, Deadline deadline);

}  // namespace tandem::cluster
