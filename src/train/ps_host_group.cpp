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

PsHostGroup::PsHostGroup(gloo::rendezvous::Store& store, std::vector<int> members, int worker, double timeout_s,
                         std::vector<Range> chunks)
    : members_(std::move(members)), chunks_(std::move(chunks)) {
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

size_t PsHostGroup::shareEnd(size_t end) const {
  const size_t group = members_.size();
  return std::min(chunks_.size(), (std::min(end, chunks_.size()) + group - 1) / group * group);
}

void PsHostGroup::share(float* flat, size_t first, size_t end, Deadline deadline) {
  TANDEM_ENFORCE(first % members_.size() == 0 && shareEnd(end) == end,
                 "host share of chunks [{}, {}) is not on a group boundary", first, end);
  // An all-gather per group of chunks, each member's chunk in one block,
  // rather than a broadcast per chunk: in the lab, 17 one-way broadcasts of
  // 64 KiB over loopback often stalled about 44 ms each.
  try {
    thread_
        ->submit([this, flat, first, end] {  // by value: a timed-out wait leaves it queued
          for (size_t g = first; g < end; g += members_.size()) {
            const int64_t start = obs::Timeline::nowUs();
            const size_t last = std::min(end, g + members_.size());
            size_t block = 0;
            for (size_t c = g; c < last; ++c) block = std::max(block, static_cast<size_t>(chunks_[c].length));
            packed_.resize(block * members_.size());
            float* mine = packed_.data() + static_cast<size_t>(rank_) * block;
            const size_t own = g + static_cast<size_t>(rank_);  // ownerOf(g + r) == r
            if (own < last) std::memcpy(mine, flat + chunks_[own].begin, static_cast<size_t>(chunks_[own].length) * sizeof(float));
            comm_->allgather(mine, packed_.data(), block * sizeof(float));
            for (size_t c = g; c < last; ++c) {
              if (c == own) continue;
              std::memcpy(flat + chunks_[c].begin, packed_.data() + (c - g) * block,
                          static_cast<size_t>(chunks_[c].length) * sizeof(float));
            }
            if (auto* timeline = obs::Timeline::current()) {
              timeline->span("host share", obs::Lane::kComm, start, obs::Timeline::nowUs(),
                             {{"chunks", fmt::format("{}-{}", g, last - 1)}});
            }
          }
        })
        .wait(deadline, "the host-mates' pulled chunks");
  } catch (const PeerError& e) {
    throw PeerError(fmt::format("sharing pulled chunks with this host's workers ({}): {}",
                                collective::ranksText(members_), e.what()));
  }
}

}  // namespace tandem::train
