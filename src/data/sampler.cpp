#include "data/sampler.hpp"

#include <array>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace tandem::data {

// Two entries, because prefetch threads straddle an epoch boundary: one
// builds the last steps of epoch e while another starts e + 1.
struct ShardSampler::EpochCache {
  struct Entry {
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> order;
  };
  std::mutex mu;
  std::array<Entry, 2> entries;
  size_t next_slot = 0;
};

namespace {

// Uniform in [0, bound) by rejection, so it is exact and identical on every
// standard library (std::uniform_int_distribution is not specified bit-for-bit).
uint64_t uniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % bound;
}

}  // namespace

ShardSampler::ShardSampler(int64_t dataset_size, int64_t batch_size, int rank, int world,
                           uint64_t seed, bool shuffle, int64_t origin_step, DataPosition origin)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      rank_(rank),
      world_(world),
      seed_(seed),
      shuffle_(shuffle),
      origin_step_(origin_step),
      origin_(origin),
      cache_(std::make_shared<EpochCache>()) {
  if (dataset_size <= 0) {
    throw InputError(fmt::format("sampler: dataset size must be positive, got {}", dataset_size));
  }
  if (batch_size <= 0) {
    throw InputError(fmt::format("sampler: batch size must be positive, got {}", batch_size));
  }
  if (world <= 0 || rank < 0 || rank >= world) {
    throw InputError(fmt::format("sampler: rank {} is not in [0, world={})", rank, world));
  }
  if (batch_size > dataset_size / world) {
    throw InputError(fmt::format(
        "sampler: global batch {} x {} workers = {} exceeds the dataset's {} samples", batch_size,
        world, batch_size * world, dataset_size));
  }
  steps_per_epoch_ = dataset_size / (batch_size * world);
  if (origin_step < 0 || origin.epoch < 0 || origin.taken < 0 || origin.taken > dataset_size) {
    throw InputError(fmt::format("sampler: origin at step {} (epoch {}, {} samples taken) is not in a {}-sample "
                                 "dataset", origin_step, origin.epoch, origin.taken, dataset_size));
  }
  const int64_t global = batch_size * world;
  if (origin_.taken + global > dataset_size) origin_ = {origin_.epoch + 1, 0};
  origin_epoch_steps_ = (dataset_size - origin_.taken) / global;
}

DataPosition ShardSampler::positionAt(int64_t global_step) const {
  TANDEM_ENFORCE(global_step >= origin_step_, "step {} is before the sampler's origin at step {}", global_step,
                 origin_step_);
  const int64_t global = batch_size_ * world_;
  int64_t k = global_step - origin_step_;
  if (k < origin_epoch_steps_) return {origin_.epoch, origin_.taken + k * global};
  k -= origin_epoch_steps_;
  return {origin_.epoch + 1 + k / steps_per_epoch_, (k % steps_per_epoch_) * global};
}

std::vector<int64_t> ShardSampler::epochOrder(int64_t epoch) const {
  TANDEM_ENFORCE(epoch >= 0, "epoch {} is negative", epoch);
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle_) return order;
  std::mt19937_64 rng(mixSeed(seed_, static_cast<uint64_t>(epoch)));
  for (size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[uniformBelow(rng, i + 1)]);
  }
  return order;
}

std::vector<int64_t> ShardSampler::batchIndices(int64_t global_step) const {
  const DataPosition at = positionAt(global_step);
  const int64_t epoch = at.epoch;
  const int64_t begin = at.taken + int64_t{rank_} * batch_size_;
  if (!shuffle_) {
    std::vector<int64_t> out(static_cast<size_t>(batch_size_));
    std::iota(out.begin(), out.end(), begin);
    return out;
  }
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    std::lock_guard lock(cache_->mu);
    for (auto& e : cache_->entries) {
      if (e.epoch == epoch) order = e.order;
    }
    if (!order) {
      // Shuffling under the lock costs a millisecond once per epoch and
      // stops two threads from computing the same order.
      order = std::make_shared<const std::vector<int64_t>>(epochOrder(epoch));
      auto& slot = cache_->entries[cache_->next_slot];
      cache_->next_slot = (cache_->next_slot + 1) % cache_->entries.size();
      slot.epoch = epoch;
      slot.order = order;
    }
  }
  return {order->begin() + begin, order->begin() + begin + batch_size_};
}

}  // namespace tandem::data
