#include "lab/placement.hpp"

#include <fmt/format.h>

#include <map>

#include "core/error.hpp"

namespace tandem::lab {

Placement place(const PlacementSpec& spec) {
  if (spec.worker_hosts < 1) throw InputError(fmt::format("--hosts: must be >= 1, got {}", spec.worker_hosts));
  if (spec.workers_per_host < 1) {
    throw InputError(fmt::format("--workers-per-host: must be >= 1, got {}", spec.workers_per_host));
  }
  if (spec.servers < 0) throw InputError(fmt::format("--ps: must be >= 0, got {}", spec.servers));
  if (!spec.dedicated_servers && spec.servers > spec.worker_hosts) {
    throw InputError(fmt::format("--ps {} colocated: at most one server per worker host ({} hosts); use "
                                 "--ps-placement dedicated for more",
                                 spec.servers, spec.worker_hosts));
  }
  Placement p;
  p.hosts = spec.worker_hosts + (spec.dedicated_servers ? spec.servers : 0);
  std::map<int, int> next_port;
  auto port_on = [&next_port](int host) {
    auto [it, fresh] = next_port.try_emplace(host, kFirstTaskPort);
    return it->second++;
  };
  // Servers first: a host's first port is its server's, whatever the worker count.
  for (int s = 0; s < spec.servers; ++s) {
    const int host = spec.dedicated_servers ? spec.worker_hosts + s : s;
    p.servers.push_back({"ps", s, host, port_on(host)});
  }
  for (int w = 0; w < spec.worker_hosts * spec.workers_per_host; ++w) {
    const int host = w / spec.workers_per_host;
    p.workers.push_back({"worker", w, host, port_on(host)});
  }
  return p;
}

}  // namespace tandem::lab
