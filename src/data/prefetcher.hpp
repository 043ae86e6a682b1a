#pragma once
// Builds batches on worker threads ahead of the trainer, keeping at most
// `depth` finished batches queued. Batches come out in step order whatever
// order the threads finish in, so training stays deterministic.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.hpp"
#include "data/sampler.hpp"

namespace tandem::data {

struct PrefetchOptions {
  int threads = 2;
  int depth = 4;
  uint64_t augment_seed = 0;
  // Batches in page-locked memory, which a GPU copies from without the
  // host waiting (needs LibTorch's CUDA half loaded).
  bool pin_memory = false;
};

class Prefetcher {
 public:
  // Produces the batches of global steps [first_step, end_step).
  Prefetcher(DatasetPtr dataset, ShardSampler sampler, int64_t first_step, int64_t end_step,
             PrefetchOptions options);
  ~Prefetcher();  // stops and joins the threads; never blocks on a full queue
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in step order. Blocks until it is ready; rethrows an
  // exception raised while building it (e.g. an I/O error). Throws Error if
  // called past end_step. Call from one thread only.
  Batch next();

 private:
  void run();

  DatasetPtr dataset_;
  ShardSampler sampler_;
  int64_t end_step_;
  PrefetchOptions options_;
  std::mutex mu_;
  std::condition_variable produced_;
  std::condition_variable consumed_;
  int64_t next_to_claim_;
  int64_t next_to_return_;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;
  int64_t error_step_ = -1;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::data
