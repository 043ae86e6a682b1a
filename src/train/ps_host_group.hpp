#pragma once
// Hierarchical aggregation for synchronous parameter servers (as BytePS
// does): the workers of one host first sum each chunk among themselves over
// loopback (collective::HostMates, as hierarchical all-reduce does), one of them (the chunk's owner on that host) pushes the
// sum and pulls the new values, and then hands them to the others. A host's
// link carries each chunk once per host instead of once per worker.
//
// Chunks go in groups of size() in key order, one per member (chunk g + r
// is rank r's, the servers' ps::pusherRank), both ways: a group's sum is
// one reduce-scatter (each member gets its own chunk's sum), and its share
// one all-gather. Every worker of the host must hand chunks
// over in the same order (the capture's in-order mode does) and share them
// in key order.
#include "cluster/kv_store.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/host_groups.hpp"
#include "collective/comm_thread.hpp"
#include "collective/host_mates.hpp"
#include "core/deadline.hpp"
#include "obs/timeline.hpp"
#include "ps/protocol.hpp"

namespace tandem::train {

class PsHostGroup {
 public:
  struct Range {  // a chunk's floats in the model's key space
    int64_t begin = 0;
    int64_t length = 0;
  };
  // Connects this worker to the others of its host through `store` (the
  // job's coordinator store; keys prefixed by the group's first worker).
  // `chunks`: the layout's, in key order. Throws PeerError naming a
  // host-mate that does not arrive in time. With a `timeline`, the sums and
  // shares are spans on it.
  PsHostGroup(cluster::KeyValueStore& store, std::vector<int> members, int worker, double timeout_s,
              std::vector<Range> chunks, obs::Timeline* timeline = nullptr);
  ~PsHostGroup();

  int rank() const { return mates_.rank(); }
  int size() const { return mates_.size(); }
  // Chunk `c`'s gradients (in `flat`, the model's key space) are complete.
  // Once its whole group is, the group's thread sums it across the host,
  // each member getting its own chunk's sum in `flat`, and then runs
  // push(that chunk). Called from autograd's thread.
  void reduce(float* flat, size_t c, std::function<void(size_t)> push);
  // Waits for every reduce of this step. Throws PeerError naming `what`.
  void awaitReduces(Deadline deadline);
  // Hands the values (at `flat` + begin) of chunks [first, end) from their
  // owners to the host, and waits. `first` and `end` must be group
  // boundaries (shareEnd), so that host-mates cutting the model differently
  // still run the same exchanges.
  void share(float* flat, size_t first, size_t end, Deadline deadline);
  // The group boundary at or after chunk `end` (at most the chunk count).
  size_t shareEnd(size_t end) const;

 private:
  // The group starting at chunk `first` (a multiple of size()): its end,
  // and the chunk this member pushes in it (pusherRank(first + r) == r; at
  // or past the end when the last group has none for it).
  size_t groupEnd(size_t first) const { return std::min(chunks_.size(), first + static_cast<size_t>(size())); }
  size_t ownIn(size_t first) const { return first + static_cast<size_t>(rank()); }
  // The group's chunks as HostMates blocks, one per member (0 past the end).
  std::vector<size_t> blockLengths(size_t first) const;

  std::vector<Range> chunks_;
  obs::Timeline* timeline_;
  collective::HostMates mates_;
  std::unique_ptr<collective::CommThread> thread_;  // after mates_: goes first
  std::vector<collective::CommHandle> pending_;
  std::vector<size_t> ready_;  // per group: its chunks complete this step
};

}  // namespace tandem::train
