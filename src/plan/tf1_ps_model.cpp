#include "plan/tf1_ps_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace tandem::plan {

std::vector<int> roundRobinPlacement(size_t variables, int servers, int first_slot) {
  std::vector<int> owner(variables);
  for (size_t v = 0; v < variables; ++v) owner[v] = static_cast<int>((v + static_cast<size_t>(first_slot)) % static_cast<size_t>(servers));
  return owner;
}

std::vector<int> greedyPlacement(const std::vector<double>& variable_bytes, int servers) {
  std::vector<double> load(static_cast<size_t>(servers), 0.0);
  std::vector<int> owner;
  for (double b : variable_bytes) {
    const auto emptiest = std::min_element(load.begin(), load.end());
    owner.push_back(static_cast<int>(emptiest - load.begin()));
    *emptiest += b;
  }
  return owner;
}

Tf1PsPrediction predictTf1Ps(const Workload& work, const Cluster& cluster, const std::vector<double>& variable_bytes,
                             const Tf1PsCosts& costs) {
  if (variable_bytes.empty()) throw InputError("tf1-ps: the model has no variables");
  if (!(costs.worker_bytes_per_s > 0 && costs.server_bytes_per_s > 0 && cluster.link_bytes_per_s > 0)) {
    throw InputError("tf1-ps: the worker, server and link rates must be positive");
  }
  const int k = cluster.hosts;  // one PS per host
  const double n = cluster.workers();
  const double g = cluster.workers_per_host;
  const double s = std::accumulate(variable_bytes.begin(), variable_bytes.end(), 0.0);
  std::vector<double> held(static_cast<size_t>(k), 0.0);
  std::vector<double> count(static_cast<size_t>(k), 0.0);
  const auto owner = costs.placement == VariablePlacement::kRoundRobin ? roundRobinPlacement(variable_bytes.size(), k)
                                                                       : greedyPlacement(variable_bytes, k);
  for (size_t v = 0; v < variable_bytes.size(); ++v) {
    held[static_cast<size_t>(owner[v])] += variable_bytes[v];
    count[static_cast<size_t>(owner[v])] += 1;
  }
  double server_s = 0;
  double link_bytes = 0;
  double busiest_share = 0;
  for (int j = 0; j < k; ++j) {
    const double b = held[static_cast<size_t>(j)];
    // Every worker's gradient in and variable out, plus a cost per message.
    server_s = std::max(server_s, n * 2 * b / costs.server_bytes_per_s + n * 2 * count[static_cast<size_t>(j)] * costs.message_s);
    // Host j's link, each way: its PS serves the other hosts' workers, and
    // its own workers reach the other PSes.
    if (k > 1) link_bytes = std::max(link_bytes, (n - g) * b + g * (s - b));
    busiest_share = std::max(busiest_share, b / s);
  }
  const double worker_s = 2 * s / costs.worker_bytes_per_s;
  const double link_s = link_bytes / cluster.link_bytes_per_s + (k > 1 ? 2 * cluster.latency_s : 0);
  Tf1PsPrediction p;
  p.comm_s = std::max({worker_s, server_s, link_s});
  p.step_s = work.forward_s + work.backward_s + p.comm_s;
  p.samples_per_s = n * static_cast<double>(work.batch_per_worker) / p.step_s;
  p.efficiency = (work.forward_s + work.backward_s) / p.step_s;
  p.busiest_server_share = busiest_share;
  p.bottleneck = p.comm_s == worker_s ? "worker stream" : p.comm_s == server_s ? "busiest PS" : "links";
  return p;
}

}  // namespace tandem::plan
