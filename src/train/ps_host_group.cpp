#include "train/ps_host_group.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "collective/host_communicator.hpp"
#include "core/error.hpp"

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
    comm_->allreduceSum(data, n);
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
  try {
    thread_
        ->submit([&] {
          for (size_t c = 0; c < chunks.size(); ++c) {
            comm_->broadcast(flat + chunks[c].begin, static_cast<size_t>(chunks[c].length) * sizeof(float),
                             ownerOf(c));
          }
        })
        .wait(deadline, "the host-mates' pulled chunks");
  } catch (const PeerError& e) {
    throw PeerError(fmt::format("sharing pulled chunks with this host's workers ({}): {}",
                                collective::ranksText(members_), e.what()));
  }
}

}  // namespace tandem::train
