#include "train/ps_host_group.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "cluster/kv_store.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "collective/host_communicator.hpp"
#include "core/error.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {

PsHostGroup::PsHostGroup(cluster::KeyValueStore& store, std::vector<int> members, int worker, double timeout_s,
                         std::vector<Range> chunks, obs::Timeline* timeline)
    : members_(std::move(members)), chunks_(std::move(chunks)), timeline_(timeline) {
  const auto me = std::find(members_.begin(), members_.end(), worker);
  TANDEM_ENFORCE(me != members_.end(), "worker {} is not in its own host group", worker);
  rank_ = static_cast<int>(me - members_.begin());
  prefixed_ = std::make_unique<cluster::PrefixStore>(fmt::format("host-group-{}", members_.front()), store);
  collective::CommunicatorOptions options;
  options.rank = rank_;
  options.size = size();
  options.local_host = "127.0.0.1";  // host-mates share this machine's loopback
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (size_t c = 1; c < chunks_.size(); ++c) {
    TANDEM_ENFORCE(chunks_[c].begin == chunks_[c - 1].begin + chunks_[c - 1].length,
                   "host group: chunk {} does not follow chunk {} in key order", c, c - 1);
  }
  ready_.assign((chunks_.size() + members_.size() - 1) / members_.size(), 0);
  comm_ = collective::Communicator::connect(*prefixed_, options);
  thread_ = std::make_unique<collective::CommThread>();
}

PsHostGroup::~PsHostGroup() {
  thread_.reset();  // runs what is queued while comm_ still exists
}

void PsHostGroup::reduce(float* flat, size_t c, std::function<void(size_t)> push) {
  const size_t group = members_.size();
  const size_t first = c / group * group;
  const size_t end = groupEnd(first);
  if (++ready_[first / group] < end - first) return;
  ready_[first / group] = 0;
  // One all-to-all per group rather than an all-reduce per chunk: in the lab
  // (4 x 4 workers on 2 cores) each chunk's all-reduce took 1-7 ms, and 32
  // of them in a row kept the last push 45 ms behind backward's end.
  pending_.push_back(thread_->submit([this, flat, first, end, push = std::move(push)] {
    const int64_t start = obs::Timeline::nowUs();
    const size_t own = ownIn(first);
    const size_t length = own < end ? static_cast<size_t>(chunks_[own].length) : 0;
    std::vector<size_t> send(members_.size(), 0);
    for (size_t k = first; k < end; ++k) send[k - first] = static_cast<size_t>(chunks_[k].length) * sizeof(float);
    const std::vector<size_t> receive(members_.size(), length * sizeof(float));
    received_.resize(length * members_.size());
    comm_->alltoallv(flat + chunks_[first].begin, send, received_.data(), receive);
    if (length > 0) {
      // In rank order, the same on every host and every run.
      float* sum = flat + chunks_[own].begin;
      std::memcpy(sum, received_.data(), length * sizeof(float));
      for (size_t r = 1; r < members_.size(); ++r) {
        const float* part = received_.data() + r * length;
        for (size_t i = 0; i < length; ++i) sum[i] += part[i];
      }
    }
    if (timeline_ != nullptr) {
      timeline_->span("host sum", obs::Lane::kComm, start, obs::Timeline::nowUs(),
                     {{"chunks", fmt::format("{}-{}", first, end - 1)}});
    }
    if (length > 0) push(own);
  }));
}

void PsHostGroup::awaitReduces(Deadline deadline) {
  for (size_t g = 0; g < ready_.size(); ++g) {
    TANDEM_ENFORCE(ready_[g] == 0, "host group: chunk group {} was left incomplete this step", g);
  }
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
            const size_t last = groupEnd(g);  // end is a group boundary
            size_t block = 0;
            for (size_t c = g; c < last; ++c) block = std::max(block, static_cast<size_t>(chunks_[c].length));
            packed_.resize(block * members_.size());
            float* mine = packed_.data() + static_cast<size_t>(rank_) * block;
            const size_t own = ownIn(g);
            if (own < last) std::memcpy(mine, flat + chunks_[own].begin, static_cast<size_t>(chunks_[own].length) * sizeof(float));
            comm_->allgather(mine, packed_.data(), block * sizeof(float));
            for (size_t c = g; c < last; ++c) {
              if (c == own) continue;
              std::memcpy(flat + chunks_[c].begin, packed_.data() + (c - g) * block,
                          static_cast<size_t>(chunks_[c].length) * sizeof(float));
            }
            if (timeline_ != nullptr) {
              timeline_->span("host share", obs::Lane::kComm, start, obs::Timeline::nowUs(),
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
