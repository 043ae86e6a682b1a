#include "cluster/host_groups.hpp"

#include <algorithm>

namespace tandem::cluster {

std::vector<std::vector<int>> workersByHost(const ClusterSpec& spec) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> hosts;
  for (int w = 0; w < static_cast<int>(spec.worker_hosts.size()); ++w) {
    const std::string& host = spec.worker_hosts[static_cast<size_t>(w)].host;
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

bool useHostGroups(const std::vector<std::vector<int>>& groups, const std::string& setting) {
  if (setting != "auto" || groups.size() < 2) return false;
  return std::any_of(groups.begin(), groups.end(), [](const auto& g) { return g.size() > 1; });
}

}  // namespace tandem::cluster
