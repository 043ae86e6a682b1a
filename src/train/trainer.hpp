#pragma once
// The training loop: prefetched input, forward/backward, gradient sync
// through the Strategy, update, and the bookkeeping around them (timing
// breakdown, metrics, evaluation, checkpoints, progress).
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <optional>

#include "cluster/job_context.hpp"
#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "train/config.hpp"
#include "train/loss.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

// A model, data or loss of the caller's own (the C++ API's tandem::fit),
// used instead of the config's names for them.
struct TrainerParts {
  models::ModelPtr model;
  std::optional<data::DatasetSplits> data;
  LossFunction loss;
};

class Trainer {
 public:
  // Throws InputError for a bad config (checked here, before any work).
  // `stop` (optional, may be set from a signal handler) asks the run to end
  // after the current step with a checkpoint, as if it had been planned.
  // `context`: the job's, built by the entry point; the run records in its
  // start how far it got (a failure may then restart in place).
  Trainer(TrainConfig config, std::unique_ptr<Strategy> strategy, cluster::JobContext& context,
          const std::atomic<bool>* stop = nullptr, TrainerParts parts = {});

  // Runs to completion (or until stopped) and returns the summary that was
  // also written to <out>/summary.json; "interrupted" tells which.
  // Throws InputError for bad data or checkpoints.
  nlohmann::json run();

 private:
  TrainConfig config_;
  std::unique_ptr<Strategy> strategy_;
  cluster::JobContext& context_;
  const std::atomic<bool>* stop_;
  TrainerParts parts_;
};

// What every worker of a run must agree on: model tensors (names, dtypes,
// shapes), data, batch, optimizer, schedule, seed and length.
nlohmann::json runFingerprint(const TrainConfig& config, const torch::nn::Module& model, int64_t dataset_size,
                              int64_t start_step, int world);

// Refuses to resume a run whose checkpoint was made with a different model,
// dataset, batch size or optimizer, naming the field and both values.
void checkResumeCompatible(const TrainConfig& current, const TrainConfig& saved, const std::string& checkpoint);

}  // namespace tandem::train
