#include "collective/host_communicator.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.hpp"

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

}  // namespace

std::string ranksText(const std::vector<int>& members) {
  std::vector<std::string> pairs;
  for (size_t r = 0; r < members.size(); ++r) pairs.push_back(fmt::format("rank {} is worker {}", r, members[r]));
  return fmt::format("{}", fmt::join(pairs, ", "));
}

namespace {

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(cluster::KeyValueStore& store, const CommunicatorOptions& options,
                   const std::vector<std::vector<int>>& groups, const std::string& loopback)
      : options_(options) {
    for (const auto& group : groups) leaders_.push_back(group.front());
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto me = std::find(groups[g].begin(), groups[g].end(), options.rank);
      if (me == groups[g].end()) continue;
      host_ = groups[g];
      host_index_ = static_cast<int>(g);
    }
    // Three meshes, each under its own prefix of the store.
    all_store_ = std::make_unique<cluster::PrefixStore>("all", store);
    all_ = Communicator::connect(*all_store_, options);
    CommunicatorOptions local = options;
    local.rank = static_cast<int>(std::find(host_.begin(), host_.end(), options.rank) - host_.begin());
    local.size = static_cast<int>(host_.size());
    local.local_host = loopback;
    host_store_ = std::make_unique<cluster::PrefixStore>(fmt::format("host-{}", host_.front()), store);
    // A host-mate that fails while the meshes still connect is named as
    // its worker too, as in a sum.
    naming("connecting with this host's workers", host_,
           [&] { host_comm_ = Communicator::connect(*host_store_, local); });
    if (isLeader()) {
      CommunicatorOptions across = options;
      across.rank = host_index_;
      across.size = static_cast<int>(leaders_.size());
      leaders_store_ = std::make_unique<cluster::PrefixStore>("leaders", store);
      naming("connecting across hosts, one worker each", leaders_,
             [&] { leaders_comm_ = Communicator::connect(*leaders_store_, across); });
    }
  }

  ~HostCommunicator() override {
    // Each waits for its peers to arrive (Communicator's destructor); all
    // ranks tear down in this order.
    leaders_comm_.reset();
    host_comm_.reset();
    all_.reset();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void allreduceSum(float* data, size_t count) override {
    sum([&](Communicator& c) { c.allreduceSum(data, count); }, data, count * sizeof(float));
  }
  void allreduceSumOnce(float* data, size_t count) override {
    sum([&](Communicator& c) { c.allreduceSumOnce(data, count); }, data, count * sizeof(float));
  }
  void allreduceSum16(void* data, size_t count, WireDtype dtype) override {
    sum([&](Communicator& c) { c.allreduceSum16(data, count, dtype); }, data, count * wireBytes(dtype));
  }

  // A user's reduction (rare, any type or op): flat over every rank.
  void allreduce(void* data, size_t count, ElementType type, Reduction op) override {
    all_->allreduce(data, count, type, op);
  }
  void broadcast(void* data, size_t bytes, int root) override { all_->broadcast(data, bytes, root); }
  void allgather(const void* in, void* out, size_t bytes) override { all_->allgather(in, out, bytes); }
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    all_->alltoallv(in, send_bytes, out, recv_bytes);
  }
  void barrier() override { all_->barrier(); }

 private:
  bool isLeader() const { return host_.front() == options_.rank; }
  template <class Reduce>
  void sum(Reduce&& reduce, void* data, size_t bytes) {
    naming("summing with this host's workers", host_, [&] { reduce(*host_comm_); });
    if (leaders_comm_) naming("summing across hosts, one worker each", leaders_, [&] { reduce(*leaders_comm_); });
    naming("summing with this host's workers", host_, [&] { host_comm_->broadcast(data, bytes, 0); });
  }

  // Runs `body`; a PeerError from it names what `members` were doing and
  // which rank is which worker.
  template <class Body>
  void naming(const char* doing, const std::vector<int>& members, Body&& body) {
    try {
      body();
    } catch (const PeerError& e) {
      throw PeerError(fmt::format("{} ({}): {}", doing, ranksText(members), e.what()));
    }
  }

  CommunicatorOptions options_;
  std::vector<int> host_;     // this host's ranks, ascending; the first leads
  int host_index_ = 0;
  std::vector<int> leaders_;  // each host's leader, by host
  std::unique_ptr<cluster::KeyValueStore> all_store_, host_store_, leaders_store_;
  std::unique_ptr<Communicator> all_;
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> leaders_comm_;  // leaders only
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
