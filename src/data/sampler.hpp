#pragma once
// Splits each epoch's shuffled order into global batches of
// batch_size * world samples; worker `rank` takes slice `rank` of each. With
// world == 1 this is plain shuffled mini-batching, and N synchronous workers
// together see exactly the samples one process would see with the combined
// batch. The tail that does not fill a global batch is dropped.
//
// When the number of workers changes mid-epoch, a new sampler starts from
// the position the job had reached (`origin`): its global batches take the
// rest of that epoch's order, so within the epoch no sample is skipped or
// seen twice; only the tail that no longer fills a global batch is dropped.
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::data {

// Where a job is in its data: an epoch, and how many samples of that
// epoch's order its steps have taken.
struct DataPosition {
  int64_t epoch = 0;
  int64_t taken = 0;
  bool operator==(const DataPosition&) const = default;
};

class ShardSampler {
 public:
  // Throws InputError if batch_size * world exceeds dataset_size or any
  // argument is out of range.
  // `origin`: the job's position before step `origin_step`, from which
  // this sampler's workers go on (steps before it are not this sampler's).
  ShardSampler(int64_t dataset_size, int64_t batch_size, int rank, int world, uint64_t seed,
               bool shuffle = true, int64_t origin_step = 0, DataPosition origin = {});

  int64_t stepsPerEpoch() const { return steps_per_epoch_; }
  int64_t batchSize() const { return batch_size_; }

  // The sample indices of this worker's batch at a global step (epoch =
  // step / stepsPerEpoch). Pure function of the constructor arguments and
  // the step: thread-safe. Recent epochs' orders are cached (shared by
  // copies), so a call costs a slice copy, not a shuffle.
  std::vector<int64_t> batchIndices(int64_t global_step) const;
  // The job's position before `global_step`'s batch (at or after the origin
  // step): its epoch, and the samples of that epoch taken before it.
  DataPosition positionAt(int64_t global_step) const;

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
  int64_t origin_step_;
  DataPosition origin_;        // normalised: a global batch still fits its epoch
  int64_t origin_epoch_steps_;  // steps from the origin to its epoch's end
  struct EpochCache;
  std::shared_ptr<EpochCache> cache_;
};

}  // namespace tandem::data
