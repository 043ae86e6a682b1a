#include "cluster/host_groups.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cluster/membership.hpp"

namespace tandem::cluster {

std::vector<std::vector<int>> groupByAddress(const std::vector<std::string>& addresses) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> hosts;
  for (int w = 0; w < static_cast<int>(addresses.size()); ++w) {
    const std::string& host = addresses[static_cast<size_t>(w)];
    const auto it = std::find(hosts.begin(), hosts.end(), host);
    if (it == hosts.end()) {
      hosts.push_back(host);
      groups.push_back({w});
    } else {
      groups[static_cast<size_t>(it - hosts.begin())].push_back(w);
    }
  }
  return groups;
}

std::vector<std::vector<int>> workersByHost(const ClusterSpec& spec) {
  std::vector<std::string> addresses;
  for (const auto& w : spec.worker_hosts) addresses.push_back(w.host);
  return groupByAddress(addresses);
}

namespace {

std::string addressKey(int worker) { return fmt::format("hosts/worker/{}", worker); }

// The addresses `workers` published, in their order.
std::vector<std::string> readWorkerAddresses(CoordinatorClient& store, const std::vector<int>& workers,
                                             Deadline deadline) {
  std::vector<std::string> keys;
  for (int w : workers) keys.push_back(addressKey(w));
  return awaitPublished(store, keys, deadline, "telling hosts apart",
                        [](const std::string& k) { return fmt::format("worker {}", k.substr(k.rfind('/') + 1)); });
}

}  // namespace

void publishWorkerAddress(CoordinatorClient& store, int worker, const std::string& address, Deadline deadline) {
  store.set(addressKey(worker), std::vector<char>(address.begin(), address.end()), deadline);
}

std::vector<std::string> exchangeWorkerAddresses(CoordinatorClient& store, int rank, int size,
                                                 const std::string& mine, Deadline deadline) {
  publishWorkerAddress(store, rank, mine, deadline);
  std::vector<int> workers(static_cast<size_t>(size));
  for (int w = 0; w < size; ++w) workers[static_cast<size_t>(w)] = w;
  return readWorkerAddresses(store, workers, deadline);
}

std::vector<std::vector<int>> memberHostGroups(CoordinatorClient& store, const std::vector<int>& workers,
                                               HostAggregation setting, Deadline deadline) {
  if (setting != HostAggregation::kAuto || workers.size() < 2) return {};
  const auto groups = groupByAddress(readWorkerAddresses(store, workers, deadline));
  return useHostGroups(groups, setting) ? groups : std::vector<std::vector<int>>{};
}

bool useHostGroups(const std::vector<std::vector<int>>& groups, HostAggregation setting) {
  if (setting != HostAggregation::kAuto || groups.size() < 2) return false;
  return std::any_of(groups.begin(), groups.end(), [](const auto& g) { return g.size() > 1; });
}

std::vector<std::vector<int>> hostGroupsFor(const ClusterSpec& spec, HostAggregation setting,
                                            CoordinatorClient& store, const std::string& address, Deadline deadline) {
  if (setting != HostAggregation::kAuto || spec.num_workers < 2) return {};
  const auto groups =
      spec.worker_hosts.empty()
          ? groupByAddress(exchangeWorkerAddresses(store, spec.index, spec.num_workers, address, deadline))
          : workersByHost(spec);
  return useHostGroups(groups, setting) ? groups : std::vector<std::vector<int>>{};
}

}  // namespace tandem::cluster
