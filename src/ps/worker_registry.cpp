#include "ps/worker_registry.hpp"

#include <fmt/format.h>

namespace tandem::ps {

void WorkerRegistry::reset(int workers) {
  workers_.assign(static_cast<size_t>(workers), WorkerState{});
  by_routing_.clear();
}

std::string WorkerRegistry::nameOf(const std::string& routing) const {
  auto it = by_routing_.find(routing);
  return it == by_routing_.end() ? "a client" : fmt::format("worker {}", it->second);
}

std::string WorkerRegistry::bind(const std::string& routing, uint32_t worker, bool replacement, bool* replaced) {
  if (replaced != nullptr) *replaced = false;
  if (worker >= workers_.size()) {
    return fmt::format("worker {} does not exist: the cluster has {} worker(s)", worker, workers_.size());
  }
  if (auto it = by_routing_.find(routing); it != by_routing_.end() && it->second != static_cast<int>(worker)) {
    return fmt::format("this socket already said it is worker {}, not {}", it->second, worker);
  }
  WorkerState& w = workers_[worker];
  if (!w.routing.empty() && w.routing != routing) {
    if (!replacement) return fmt::format("worker {} is already connected from another socket", worker);
    by_routing_.erase(w.routing);
    w.lost = false;
    if (replaced != nullptr) *replaced = true;
  }
  w.routing = routing;
  w.last_seen = Clock::now();
  by_routing_[routing] = static_cast<int>(worker);
  return {};
}

int WorkerRegistry::touch(const std::string& routing, bool revive) {
  auto it = by_routing_.find(routing);
  if (it == by_routing_.end()) return -1;
  WorkerState& w = workers_[static_cast<size_t>(it->second)];
  w.last_seen = Clock::now();
  if (revive) w.lost = false;
  return it->second;
}

std::vector<int> WorkerRegistry::lost() const {
  std::vector<int> out;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].lost) out.push_back(static_cast<int>(w));
  }
  return out;
}

}  // namespace tandem::ps
