#pragma once
// The workers of one host, connected over its loopback: the per-host sum
// that hierarchical all-reduce (HostCommunicator) and hierarchical
// parameter servers (train::PsHostGroup) are both built on.
//
// A sum is a reduce-scatter and an all-gather over blocks, one exchange
// each. Each member adds its own block's parts in rank order, so every
// host and every run gets the same bits, however many members there are.
#include <memory>
#include <string>
#include <vector>

#include "cluster/kv_store.hpp"
#include "collective/communicator.hpp"
#include "core/error.hpp"

namespace tandem::collective {

// "rank 0 is worker 2, rank 1 is worker 3": Gloo's errors name ranks of a
// sub-communicator of `members`; the user knows the workers.
std::string ranksText(const std::vector<int>& members);

// Runs `body`; a PeerError from it becomes one that says what `members`
// were doing and which rank is which worker.
template <class Body>
void namingWorkers(const char* doing, const std::vector<int>& members, Body&& body) {
  try {
    body();
  } catch (const PeerError& e) {
    throw PeerError(std::string(doing) + " (" + ranksText(members) + "): " + e.what());
  }
}

class HostMates {
 public:
  // Connects `worker`, one of `members` (the host's workers by global
  // index, the same list on each), to the others through `store`, under
  // the key prefix `name`-<first member>. options.local_host is the
  // address host-mates reach this one at (loopback); its rank and size are
  // set here. Throws Error when `worker` is not a member, PeerError naming
  // a host-mate that does not arrive within options.timeout.
  HostMates(cluster::KeyValueStore& store, const std::string& name, std::vector<int> members, int worker,
            CommunicatorOptions options);
  ~HostMates();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }

  // `data` holds size() consecutive blocks, block r of lengths[r] floats
  // (zero is fine). Afterwards this member's block, rank(), holds the sum
  // over the host of that block, added in rank order; the other blocks are
  // unchanged.
  void reduceScatter(float* data, const std::vector<size_t>& lengths);
  // The same layout: each member's own block lands in the others' `data`.
  void allgather(float* data, const std::vector<size_t>& lengths);
  // data[0, count) summed over the host, on every member: reduceScatter
  // and allgather over blocks as even as count allows.
  void sum(float* data, size_t count);
  // The same sum on the first member only (reduceScatter, then every block
  // to it): the others' data is left partly summed.
  void sumToFirst(float* data, size_t count);
  void broadcast(void* data, size_t bytes, int root);
  // Communicator::abandon for the host's mesh.
  void abandon() { comm_->abandon(); }

 private:
  std::vector<int> members_;
  int rank_ = 0;
  std::unique_ptr<cluster::KeyValueStore> store_;
  std::unique_ptr<Communicator> comm_;
  std::vector<float> received_;  // reduceScatter: every member's part of my block
  std::vector<float> packed_;    // allgather: every block, padded to the longest
  std::vector<size_t> evenBlocks(size_t count) const;
};

}  // namespace tandem::collective
