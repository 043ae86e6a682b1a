#include "train/ps_host_group.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "collective/host_communicator.hpp"
#include "core/error.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {

PsHostGroup::PsHostGroup(gloo::rendezvous::Store& store, std::vector<int> members, int worker, double timeout_s)
    : members_(std::move(members)) {
  const auto me = std::find(members_.begin(), members_.end(), worker);
  TANDEM_ENFORCE(me != members_.end(), "worker {} is not in its own host group", worker);
  rank_ = static_cast<int>(me - members_.begin());
  prefixed_ = std::make_unique<gloo::rendezvous::PrefixStore>(fmt::format("host-group-{}", members_.front()), store);
  collective::CommunicatorOptions options;
  options.rank = rank_;
  options.size = size();
  options.local_host = "127.0.0.1";  // host-mates share this machine's loopback
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  comm_ = collective::Communicator::connect(*prefixed_, options);
  thread_ = std::make_unique<collective::CommThread>();
}

PsHostGroup::~PsHostGroup() {
  thread_.reset();  // runs what is queued while comm_ still exists
}

void PsHostGroup::reduce(float* data, size_t n, std::function<void()> then) {
  pending_.push_back(thread_->submit([this, data, n, then = std::move(then)] {
    const int64_t start = obs::Timeline::nowUs();
    comm_->allreduceSum(data, n);
    if (auto* timeline = obs::Timeline::current()) {
      timeline->span("host sum", obs::Lane::kComm, start, obs::Timeline::nowUs(), {{"bytes", n * sizeof(float)}});
    }
    then();
  }));
}

void PsHostGroup::awaitReduces(Deadline deadline) {
  auto handles = std::exchange(pending_, {});
  try {
    for (auto& handle : handles) handle.wait(deadline, "the host's sum of a chunk (a host-mate may be gone)");
  } catch (const PeerError& e) {
    throw PeerError(fmt::format("summing gradients with this host's workers ({}): {}",
                                collective::ranksText(members_), e.what()));
  }
}

void PsHostGroup::share(float* flat, const std::vector<Range>& chunks, Deadline deadline) {
  // One all-gather of each member's chunks, packed, rather than a broadcast
  // per chunk: in the lab, 17 one-way broadcasts of 64 KiB over loopback
  // often stalled about 44 ms each, up to 190 ms a step.
  std::vector<size_t> owned(members_.size(), 0);
  for (size_t c = 0; c < chunks.size(); ++c) owned[static_cast<size_t>(ownerOf(c))] += static_cast<size_t>(chunks[c].length);
  const size_t block = *std::max_element(owned.begin(), owned.end());
  packed_.resize(block * members_.size());
  auto walk = [&](int member, auto&& copy) {  // member's chunks, in its packed block
    float* packed = packed_.data() + static_cast<size_t>(member) * block;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (ownerOf(c) != member) continue;
      const auto length = static_cast<size_t>(chunks[c].length);
      copy(flat + chunks[c].begin, packed, length);
      packed += length;
    }
  };
  walk(rank_, [](const float* chunk, float* packed, size_t n) { std::memcpy(packed, chunk, n * sizeof(float)); });
  try {
    thread_
        ->submit([this, block] {  // by value: a timed-out wait leaves it queued
          const int64_t start = obs::Timeline::nowUs();
          float* mine = packed_.data() + static_cast<size_t>(rank_) * block;
          comm_->allgather(mine, packed_.data(), block * sizeof(float));
          if (auto* timeline = obs::Timeline::current()) {
            timeline->span("host share of the pulled chunks", obs::Lane::kComm, start, obs::Timeline::nowUs(),
                           {{"bytes", packed_.size() * sizeof(float)}});
          }
        })
        .wait(deadline, "the host-mates' pulled chunks");
  } catch (const PeerError& e) {
    throw PeerError(fmt::format("sharing pulled chunks with this host's workers ({}): {}",
                                collective::ranksText(members_), e.what()));
  }
  for (int member = 0; member < size(); ++member) {
    if (member == rank_) continue;
    walk(member, [](float* chunk, const float* packed, size_t n) { std::memcpy(chunk, packed, n * sizeof(float)); });
  }
}

}  // namespace tandem::train
