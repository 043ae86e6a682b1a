#pragma once
// Splits each epoch's shuffled order into global batches of
// batch_size * world samples; worker `rank` takes slice `rank` of each. With
// world == 1 this is plain shuffled mini-batching, and N synchronous workers
// together see exactly the samples one process would see with the combined
// batch. The tail that does not fill a global batch is dropped.
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::data {

class ShardSampler {
 public:
  // Throws InputError if batch_size * world exceeds dataset_size or any
  // argument is out of range.
  ShardSampler(int64_t dataset_size, int64_t batch_size, int rank, int world, uint64_t seed,
               bool shuffle = true);

  int64_t stepsPerEpoch() const { return steps_per_epoch_; }
  int64_t batchSize() const { return batch_size_; }

  // The sample indices of this worker's batch at a global step (epoch =
  // step / stepsPerEpoch). Pure function of the constructor arguments and
  // the step: thread-safe. Recent epochs' orders are cached (shared by
  // copies), so a call costs a slice copy, not a shuffle.
  std::vector<int64_t> batchIndices(int64_t global_step) const;

  // The permutation used for `epoch` (identity when shuffle is off).
  std::vector<int64_t> epochOrder(int64_t epoch) const;

 private:
  int64_t dataset_size_;
  int64_t batch_size_;
  int rank_;
  int world_;
  uint64_t seed_;
  bool shuffle_;
  int64_t steps_per_epoch_;
  struct EpochCache;
  std::shared_ptr<EpochCache> cache_;
};

}  // namespace tandem::data
