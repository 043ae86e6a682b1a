#include "collective/host_communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "collective/host_mates.hpp"
#include "core/error.hpp"
#include "core/wire_dtype.hpp"

namespace tandem::collective {
namespace {

void checkGroups(const std::vector<std::vector<int>>& groups, int size) {
  std::vector<int> seen(static_cast<size_t>(size), 0);
  for (const auto& group : groups) {
    TANDEM_ENFORCE(!group.empty(), "an empty host group");
    for (int r : group) {
      TANDEM_ENFORCE(r >= 0 && r < size, "host groups name rank {} of {}", r, size);
      TANDEM_ENFORCE(seen[static_cast<size_t>(r)]++ == 0, "host groups name rank {} twice", r);
    }
  }
  for (int r = 0; r < size; ++r) TANDEM_ENFORCE(seen[static_cast<size_t>(r)] == 1, "no host group holds rank {}", r);
}

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(cluster::KeyValueStore& store, const CommunicatorOptions& options,
                   const std::vector<std::vector<int>>& groups, const std::string& loopback)
      : options_(options) {
    std::vector<int> host;
    for (const auto& group : groups) leaders_.push_back(group.front());
    for (size_t g = 0; g < groups.size(); ++g) {
      if (std::find(groups[g].begin(), groups[g].end(), options.rank) == groups[g].end()) continue;
      host = groups[g];
      host_index_ = static_cast<int>(g);
    }
    // Three meshes, each under its own prefix of the store.
    all_store_ = std::make_unique<cluster::PrefixStore>("all", store);
    all_ = Communicator::connect(*all_store_, options);
    CommunicatorOptions local = options;
    local.local_host = loopback;
    host_ = std::make_unique<HostMates>(store, "host", host, options.rank, local);
    if (isLeader() && leaders_.size() > 1) {
      CommunicatorOptions across = options;
      across.rank = host_index_;
      across.size = static_cast<int>(leaders_.size());
      leaders_store_ = std::make_unique<cluster::PrefixStore>("leaders", store);
      namingWorkers("connecting across hosts, one worker each", leaders_,
                    [&] { leaders_comm_ = Communicator::connect(*leaders_store_, across); });
    }
  }

  ~HostCommunicator() override {
    // After a failure in one mesh the others' goodbye waits could stall on
    // peers stuck in the failed one: close every mesh at once.
    if (failed_ || std::uncaught_exceptions() > 0) abandon();
    // Otherwise each waits for its peers to arrive (Communicator's
    // destructor); all ranks tear down in this order.
    leaders_comm_.reset();
    host_.reset();
    all_.reset();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void allreduceSum(float* data, size_t count) override {
    watching([&] {
      hostSum(data, count);
      acrossHosts([&](Communicator& c) { c.allreduceSum(data, count); }, data, count * sizeof(float));
    });
  }
  void allreduceSumOnce(float* data, size_t count) override { allreduceSum(data, count); }
  // The host's sum in float32 (loopback has bytes to spare), rounded once to
  // 16 bits for the links between hosts.
  void allreduceSum16(void* data, size_t count, WireDtype dtype) override {
    watching([&] {
      staging_.resize(count);
      decodeWire(dtype, data, staging_.data(), count);
      hostSum(staging_.data(), count);
      encodeWire(dtype, staging_.data(), data, count);
      acrossHosts([&](Communicator& c) { c.allreduceSum16(data, count, dtype); }, data, count * wireBytes(dtype));
    });
  }

  // A user's reduction (rare, any type or op): flat over every rank.
  void allreduce(void* data, size_t count, ElementType type, Reduction op) override {
    watching([&] { all_->allreduce(data, count, type, op); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    watching([&] { all_->broadcast(data, bytes, root); });
  }
  void allgather(const void* in, void* out, size_t bytes) override {
    watching([&] { all_->allgather(in, out, bytes); });
  }
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    watching([&] { all_->alltoallv(in, send_bytes, out, recv_bytes); });
  }
  void barrier() override {
    watching([&] { all_->barrier(); });
  }
  void abandon() override {
    if (leaders_comm_) leaders_comm_->abandon();
    host_->abandon();
    all_->abandon();
  }

 private:
  static constexpr const char* kHostSum = "summing with this host's workers";

  template <class Body>
  void watching(Body&& body) {
    try {
      body();
    } catch (const PeerError&) {
      failed_ = true;
      throw;
    }
  }
  bool isLeader() const { return host_->rank() == 0; }
  // The host's sum: on every host-mate with one host; else on the leader
  // only, since the total across hosts comes back from it anyway.
  void hostSum(float* data, size_t count) {
    namingWorkers(kHostSum, host_->members(), [&] {
      if (leaders_.size() == 1) {
        host_->sum(data, count);
      } else {
        host_->sumToFirst(data, count);
      }
    });
  }
  // Every host-mate holds the host's sum: the leaders sum the hosts' and
  // hand the total back to their host-mates. One host: nothing to do.
  template <class Reduce>
  void acrossHosts(Reduce&& reduce, void* data, size_t bytes) {
    if (leaders_.size() == 1) return;
    if (leaders_comm_) namingWorkers("summing across hosts, one worker each", leaders_, [&] { reduce(*leaders_comm_); });
    namingWorkers(kHostSum, host_->members(), [&] { host_->broadcast(data, bytes, 0); });
  }

  CommunicatorOptions options_;
  int host_index_ = 0;
  std::vector<int> leaders_;  // each host's leader, by host
  std::unique_ptr<cluster::KeyValueStore> all_store_, leaders_store_;
  std::unique_ptr<Communicator> all_;
  std::unique_ptr<HostMates> host_;
  std::unique_ptr<Communicator> leaders_comm_;  // leaders only, with more than one host
  std::vector<float> staging_;  // allreduceSum16: the host's sum in float32
  bool failed_ = false;         // a mesh failed: the destructor closes them all at once
};

}  // namespace

std::unique_ptr<Communicator> connectByHost(cluster::KeyValueStore& store, const CommunicatorOptions& options,
                                            const std::vector<std::vector<int>>& groups, const std::string& loopback) {
  if (groups.empty()) return Communicator::connect(store, options);
  TANDEM_ENFORCE(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank {} of size {}",
                 options.rank, options.size);
  checkGroups(groups, options.size);
  return std::make_unique<HostCommunicator>(store, options, groups, loopback);
}

}  // namespace tandem::collective
