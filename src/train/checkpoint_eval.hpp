#pragma once
// A checkpoint's test accuracy and loss on the test split its run config
// names: `tandem eval`, and the evaluator task that follows a chief's
// checkpoints. The dataset and model are built from the first checkpoint
// and kept for the next ones, which must be of the same model.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "train/config.hpp"

namespace tandem::train {

class CheckpointEvaluator {
 public:
  // `data_dir`: where the dataset is, in place of the checkpoint's (empty: its own).
  CheckpointEvaluator(std::string data_dir, int64_t batch_size);

  // {checkpoint, model, dataset, global_step, test_accuracy, test_loss,
  // loss, samples}. Throws InputError naming the file for a checkpoint that
  // does not load, or one of another model than the first.
  nlohmann::json evaluate(const std::filesystem::path& checkpoint);

 private:
  std::string data_dir_;
  int64_t batch_size_;
  std::optional<TrainConfig> config_;
  data::DatasetSplits splits_;
  models::ModelPtr model_;
};

}  // namespace tandem::train
