#pragma once
// The workers one parameter server knows: which socket (ZeroMQ routing id)
// is which worker, when each was last heard from, and which the server gave
// up on. Pure bookkeeping, no sockets: the server's I/O thread owns it (not
// thread-safe).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.hpp"

namespace tandem::ps {

struct WorkerState {
  std::string routing;  // empty until its hello
  bool lost = false;
  Clock::time_point last_seen = Clock::now();
};

class WorkerRegistry {
 public:
  // `workers` workers, none connected yet.
  void reset(int workers);
  size_t size() const { return workers_.size(); }
  WorkerState& at(int worker) { return workers_.at(static_cast<size_t>(worker)); }
  const WorkerState& at(int worker) const { return workers_.at(static_cast<size_t>(worker)); }

  // "worker 3", or "a client" before its hello: how logs name a peer.
  std::string nameOf(const std::string& routing) const;

  // Binds `routing` to `worker` (its hello). Returns why it cannot, naming
  // the worker: no such worker, already connected from another socket, or
  // this socket already said it is another worker; empty when bound.
  // `replacement`: a worker already connected from another socket is taken
  // over by this one (an elastic job's replacement for a worker that died):
  // the old socket is forgotten, the worker revived, and `*replaced` set.
  std::string bind(const std::string& routing, uint32_t worker, bool replacement = false, bool* replaced = nullptr);

  // Marks the worker on `routing` as heard from now and returns it; -1 when
  // the socket never said hello. With `revive`, a worker given up on is
  // taken back (it was slow, not dead).
  int touch(const std::string& routing, bool revive);

  std::vector<int> lost() const;

 private:
  std::vector<WorkerState> workers_;
  std::unordered_map<std::string, int> by_routing_;
};

}  // namespace tandem::ps
