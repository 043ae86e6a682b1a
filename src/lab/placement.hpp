#pragma once
// Where a lab's tasks run: workers fill hosts in order, a fixed number per
// host; parameter servers go one per worker host (colocated) or on hosts of
// their own (dedicated). Pure arithmetic, so layouts can be checked without
// a network.
#include <string>
#include <vector>

namespace tandem::lab {

struct PlacementSpec {
  int worker_hosts = 2;
  int workers_per_host = 1;
  int servers = 0;
  bool dedicated_servers = false;  // servers on hosts of their own, after the worker hosts
};

struct PlacedTask {
  std::string job;  // "worker" or "ps"
  int index = 0;    // within its job
  int host = 0;
  int port = 0;     // distinct among the tasks of one host
};

struct Placement {
  int hosts = 0;  // worker hosts plus dedicated server hosts
  std::vector<PlacedTask> workers;
  std::vector<PlacedTask> servers;
};

constexpr int kFirstTaskPort = 2222;

// Throws InputError naming the flag for layouts that cannot be placed.
Placement place(const PlacementSpec& spec);

// "10.77.0.1:2222,..." for a job's tasks, given each host's address.
template <class AddressOf>
std::string hostList(const std::vector<PlacedTask>& tasks, AddressOf address_of) {
  std::string out;
  for (const auto& t : tasks) out += (out.empty() ? "" : ",") + address_of(t.host) + ":" + std::to_string(t.port);
  return out;
}

}  // namespace tandem::lab
