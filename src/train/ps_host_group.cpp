#include "train/ps_host_group.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {
namespace {

collective::CommunicatorOptions loopback(double timeout_s) {
  collective::CommunicatorOptions options;
  options.local_host = "127.0.0.1";  // host-mates share this machine's loopback
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return options;
}

std::vector<PsHostGroup::Range> inKeyOrder(std::vector<PsHostGroup::Range> chunks) {
  for (size_t c = 1; c < chunks.size(); ++c) {
    TANDEM_ENFORCE(chunks[c].begin == chunks[c - 1].begin + chunks[c - 1].length,
                   "host group: chunk {} does not follow chunk {} in key order", c, c - 1);
  }
  return chunks;
}

}  // namespace

PsHostGroup::PsHostGroup(cluster::KeyValueStore& store, std::vector<int> members, int worker, double timeout_s,
                         std::vector<Range> chunks, obs::Timeline* timeline)
    : chunks_(inKeyOrder(std::move(chunks))),
      timeline_(timeline),
      mates_(store, "host-group", std::move(members), worker, loopback(timeout_s)) {
  const auto group = static_cast<size_t>(size());
  ready_.assign((chunks_.size() + group - 1) / group, 0);
  thread_ = std::make_unique<collective::CommThread>();
}

PsHostGroup::~PsHostGroup() {
  thread_.reset();  // runs what is queued while mates_ still exists
}

std::vector<size_t> PsHostGroup::blockLengths(size_t first) const {
  std::vector<size_t> lengths(static_cast<size_t>(size()), 0);
  for (size_t c = first; c < groupEnd(first); ++c) lengths[c - first] = static_cast<size_t>(chunks_[c].length);
  return lengths;
}

void PsHostGroup::reduce(float* flat, size_t c, std::function<void(size_t)> push) {
  const auto group = static_cast<size_t>(size());
  const size_t first = c / group * group;
  if (++ready_[first / group] < groupEnd(first) - first) return;
  ready_[first / group] = 0;
  // One reduce-scatter per group rather than an all-reduce per chunk: in
  // the lab (4 x 4 workers on 2 cores) each chunk's all-reduce took 1-7 ms,
  // and 32 of them in a row kept the last push 45 ms behind backward's end.
  pending_.push_back(thread_->submit([this, flat, first, push = std::move(push)] {
    const int64_t start = obs::Timeline::nowUs();
    mates_.reduceScatter(flat + chunks_[first].begin, blockLengths(first));
    const size_t end = groupEnd(first);
    if (timeline_ != nullptr) {
      timeline_->span("host sum", obs::Lane::kComm, start, obs::Timeline::nowUs(),
                      {{"chunks", fmt::format("{}-{}", first, end - 1)}});
    }
    if (ownIn(first) < end) push(ownIn(first));
  }));
}

void PsHostGroup::awaitReduces(Deadline deadline) {
  for (size_t g = 0; g < ready_.size(); ++g) {
    TANDEM_ENFORCE(ready_[g] == 0, "host group: chunk group {} was left incomplete this step", g);
  }
  auto handles = std::exchange(pending_, {});
  collective::namingWorkers("summing gradients with this host's workers", mates_.members(), [&] {
    for (auto& handle : handles) handle.wait(deadline, "the host's sum of a chunk (a host-mate may be gone)");
  });
}

size_t PsHostGroup::shareEnd(size_t end) const {
  const auto group = static_cast<size_t>(size());
  return std::min(chunks_.size(), (std::min(end, chunks_.size()) + group - 1) / group * group);
}

void PsHostGroup::share(float* flat, size_t first, size_t end, Deadline deadline) {
  TANDEM_ENFORCE(first % static_cast<size_t>(size()) == 0 && shareEnd(end) == end,
                 "host share of chunks [{}, {}) is not on a group boundary", first, end);
  // An all-gather per group of chunks rather than a broadcast per chunk: in
  // the lab, 17 one-way broadcasts of 64 KiB over loopback often stalled
  // about 44 ms each.
  collective::namingWorkers("sharing pulled chunks with this host's workers", mates_.members(), [&] {
    thread_
        ->submit([this, flat, first, end] {  // by value: a timed-out wait leaves it queued
          for (size_t g = first; g < end; g += static_cast<size_t>(size())) {
            const int64_t start = obs::Timeline::nowUs();
            mates_.allgather(flat + chunks_[g].begin, blockLengths(g));
            if (timeline_ != nullptr) {
              timeline_->span("host share", obs::Lane::kComm, start, obs::Timeline::nowUs(),
                              {{"chunks", fmt::format("{}-{}", g, groupEnd(g) - 1)}});
            }
          }
        })
        .wait(deadline, "the host-mates' pulled chunks");
  });
}

}  // namespace tandem::train
