#include "data/prefetcher.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <utility>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace tandem::data {
namespace {

// Each epoch gets fresh augmentation while staying a pure function of the
// options and the step.
Batch buildStep(const Dataset& dataset, const ShardSampler& sampler, const PrefetchOptions& options,
                int64_t step) {
  torch::NoGradGuard no_grad;
  const auto epoch = static_cast<uint64_t>(sampler.positionAt(step).epoch);
  auto indices = sampler.batchIndices(step);
  Batch batch = dataset.getBatch(indices, mixSeed(options.augment_seed, epoch));
  if (options.pin_memory) {
    batch.inputs = batch.inputs.pin_memory();
    batch.targets = batch.targets.pin_memory();
  }
  return batch;
}

}  // namespace

Prefetcher::Prefetcher(DatasetPtr dataset, ShardSampler sampler, int64_t first_step,
                       int64_t end_step, PrefetchOptions options)
    : dataset_(std::move(dataset)),
      sampler_(std::move(sampler)),
      end_step_(end_step),
      options_(options),
      next_to_claim_(first_step),
      next_to_return_(first_step) {
  if (!dataset_) throw InputError("prefetcher: no dataset");
  if (first_step < 0 || end_step < first_step) {
    throw InputError(fmt::format("prefetcher: bad step range [{}, {})", first_step, end_step));
  }
  if (options_.threads < 0) {
    throw InputError(fmt::format("prefetcher: threads must be >= 0, got {}", options_.threads));
  }
  if (options_.depth < 1) {
    throw InputError(fmt::format("prefetcher: depth must be >= 1, got {}", options_.depth));
  }
  threads_.reserve(static_cast<size_t>(options_.threads));
  for (int t = 0; t < options_.threads; ++t) threads_.emplace_back([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  consumed_.notify_all();
  // A thread mid-build finishes that one batch and then sees stop_.
  for (auto& t : threads_) t.join();
}

void Prefetcher::run() {
  // Without this each prefetch thread gets its own OpenMP team for its small
  // tensor ops, whose spinning threads steal the cores the training
  // thread's team is using (measured: tandem/bare 0.75 -> see
  // docs/results/standalone.md).
  // Only this thread's OpenMP setting: at::set_num_threads(1) also stores the
  // process-wide count, which a thread's first at::parallel_for in our own
  // code (inline, with its own once-per-thread flag) then copied into the
  // training thread, leaving MKL and the optimizer on one core.
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  for (;;) {
    int64_t step;
    {
      std::unique_lock lock(mu_);
      // Claiming only within `depth` of the consumer bounds memory to
      // `depth` batches however slow the consumer is.
      consumed_.wait(lock, [&] {
        return stop_ || error_ || next_to_claim_ >= end_step_ ||
               next_to_claim_ < next_to_return_ + options_.depth;
      });
      if (stop_ || error_ || next_to_claim_ >= end_step_) return;
      step = next_to_claim_++;
    }
    Batch batch;
    std::exception_ptr failure;
    try {
      batch = buildStep(*dataset_, sampler_, options_, step);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      if (!failure) {
        ready_.emplace(step, std::move(batch));
      } else if (!error_ || step < error_step_) {
        // Steps before this one were all claimed already and still arrive;
        // the consumer meets the error exactly at the step that failed.
        error_ = failure;
        error_step_ = step;
      }
    }
    produced_.notify_all();
    if (failure) consumed_.notify_all();  // let idle threads see error_ and exit
  }
}

Batch Prefetcher::next() {
  std::unique_lock lock(mu_);
  if (next_to_return_ >= end_step_) {
    throw Error(fmt::format("prefetcher: next() called past the last step {}", end_step_ - 1));
  }
  const int64_t step = next_to_return_;
  if (threads_.empty()) {
    lock.unlock();
    Batch batch = buildStep(*dataset_, sampler_, options_, step);
    lock.lock();
    ++next_to_return_;
    return batch;
  }
  produced_.wait(lock, [&] { return ready_.count(step) > 0 || (error_ && error_step_ == step); });
  auto it = ready_.find(step);
  if (it == ready_.end()) std::rethrow_exception(error_);
  Batch batch = std::move(it->second);
  ready_.erase(it);
  ++next_to_return_;
  lock.unlock();
  consumed_.notify_all();
  return batch;
}

}  // namespace tandem::data
