#include "collective/host_mates.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/error.hpp"

namespace tandem::collective {

std::string ranksText(const std::vector<int>& members) {
  std::vector<std::string> pairs;
  for (size_t r = 0; r < members.size(); ++r) pairs.push_back(fmt::format("rank {} is worker {}", r, members[r]));
  return fmt::format("{}", fmt::join(pairs, ", "));
}

HostMates::HostMates(cluster::KeyValueStore& store, const std::string& name, std::vector<int> members, int worker,
                     CommunicatorOptions options)
    : members_(std::move(members)) {
  const auto me = std::find(members_.begin(), members_.end(), worker);
  TANDEM_ENFORCE(me != members_.end(), "worker {} is not among its host's workers ({})", worker,
                 fmt::join(members_, ", "));
  rank_ = static_cast<int>(me - members_.begin());
  options.rank = rank_;
  options.size = size();
  store_ = std::make_unique<cluster::PrefixStore>(fmt::format("{}-{}", name, members_.front()), store);
  namingWorkers("connecting with this host's workers", members_,
                [&] { comm_ = Communicator::connect(*store_, options); });
}

HostMates::~HostMates() = default;

namespace {

// Where block r starts among consecutive blocks of `lengths` floats.
size_t blockStart(const std::vector<size_t>& lengths, size_t r) {
  return std::accumulate(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(r), size_t{0});
}

}  // namespace

void HostMates::reduceScatter(float* data, const std::vector<size_t>& lengths) {
  TANDEM_ENFORCE(lengths.size() == members_.size(), "{} block lengths for {} host-mates", lengths.size(), size());
  if (size() == 1) return;
  const size_t own = lengths[static_cast<size_t>(rank_)];
  std::vector<size_t> send(lengths.size());
  for (size_t r = 0; r < lengths.size(); ++r) send[r] = lengths[r] * sizeof(float);
  const std::vector<size_t> receive(lengths.size(), own * sizeof(float));
  received_.resize(own * members_.size());
  comm_->alltoallv(data, send, received_.data(), receive);
  if (own == 0) return;
  float* sum = data + blockStart(lengths, static_cast<size_t>(rank_));
  std::memcpy(sum, received_.data(), own * sizeof(float));
  for (size_t r = 1; r < members_.size(); ++r) {
    const float* part = received_.data() + r * own;
    for (size_t i = 0; i < own; ++i) sum[i] += part[i];
  }
}

void HostMates::allgather(float* data, const std::vector<size_t>& lengths) {
  TANDEM_ENFORCE(lengths.size() == members_.size(), "{} block lengths for {} host-mates", lengths.size(), size());
  if (size() == 1) return;
  // Gloo's all-gather takes equal blocks: each goes padded to the longest.
  const size_t block = *std::max_element(lengths.begin(), lengths.end());
  packed_.resize(block * members_.size());
  const auto me = static_cast<size_t>(rank_);
  float* mine = packed_.data() + me * block;
  std::memcpy(mine, data + blockStart(lengths, me), lengths[me] * sizeof(float));
  comm_->allgather(mine, packed_.data(), block * sizeof(float));
  float* at = data;
  for (size_t r = 0; r < lengths.size(); at += lengths[r], ++r) {
    if (r != me) std::memcpy(at, packed_.data() + r * block, lengths[r] * sizeof(float));
  }
}

std::vector<size_t> HostMates::evenBlocks(size_t count) const {
  const size_t n = members_.size();
  std::vector<size_t> lengths(n, count / n);
  for (size_t r = 0; r < count % n; ++r) ++lengths[r];
  return lengths;
}

void HostMates::sum(float* data, size_t count) {
  const auto lengths = evenBlocks(count);
  reduceScatter(data, lengths);
  allgather(data, lengths);
}

void HostMates::sumToFirst(float* data, size_t count) {
  const auto lengths = evenBlocks(count);
  reduceScatter(data, lengths);
  if (size() == 1) return;
  // One exchange: each member sends its summed block to the first, which
  // receives them all in block order (its own included) and copies them in.
  const size_t n = members_.size();
  const auto me = static_cast<size_t>(rank_);
  std::vector<size_t> send(n, 0), receive(n, 0);
  send[0] = lengths[me] * sizeof(float);
  if (rank_ == 0) {
    for (size_t r = 0; r < n; ++r) receive[r] = lengths[r] * sizeof(float);
  }
  const float* mine = data + blockStart(lengths, me);
  received_.resize(rank_ == 0 ? count : 0);
  comm_->alltoallv(mine, send, received_.data(), receive);
  if (rank_ == 0) std::memcpy(data, received_.data(), count * sizeof(float));
}

void HostMates::broadcast(void* data, size_t bytes, int root) { comm_->broadcast(data, bytes, root); }

}  // namespace tandem::collective
