#pragma once
// The training loop: prefetched input, forward/backward, gradient sync
// through the Strategy, update, and the bookkeeping around them (timing
// breakdown, metrics, evaluation, checkpoints, progress).
#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>

#include "train/config.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

class Trainer {
 public:
  // Throws InputError for a bad config (checked here, before any work).
  // `stop` (optional, may be set from a signal handler) asks the run to end
  // after the current step with a checkpoint, as if it had been planned.
  Trainer(TrainConfig config, std::unique_ptr<Strategy> strategy, const std::atomic<bool>* stop = nullptr);

  // Runs to completion (or until stopped) and returns the summary that was
  // also written to <out>/summary.json; "interrupted" tells which.
  // Throws InputError for bad data or checkpoints.
  nlohmann::json run();

 private:
  TrainConfig config_;
  std::unique_ptr<Strategy> strategy_;
  const std::atomic<bool>* stop_;
};

// Refuses to resume a run whose checkpoint was made with a different model,
// dataset, batch size or optimizer, naming the field and both values.
void checkResumeCompatible(const TrainConfig& current, const TrainConfig& saved, const std::string& checkpoint);

}  // namespace tandem::train
