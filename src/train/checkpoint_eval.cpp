#include "train/checkpoint_eval.hpp"

#include <utility>

#include "train/checkpoint.hpp"
#include "train/evaluator.hpp"
#include "train/loss.hpp"
#include "train/model_for_dataset.hpp"

namespace tandem::train {

CheckpointEvaluator::CheckpointEvaluator(std::string data_dir, int64_t batch_size)
    : data_dir_(std::move(data_dir)), batch_size_(batch_size) {}

nlohmann::json CheckpointEvaluator::evaluate(const std::filesystem::path& checkpoint) {
  LoadedCheckpoint loaded(checkpoint);
  if (!config_) {
    TrainConfig config = trainConfigFromJson(loaded.meta().config);
    if (!data_dir_.empty()) config.dataset.data_dir = data_dir_;
    config.dataset.augment = false;
    splits_ = data::openDataset(config.dataset);
    model_ = createModelFor(config, *splits_.test);
    config_ = std::move(config);
  }
  // Another model's checkpoint is refused here, naming the first tensor that differs.
  loaded.restore(*model_, nullptr, /*restore_rng=*/false);
  const EvalResult result = train::evaluate(*model_, *splits_.test, batch_size_, lossFunction(config_->loss));
  return {{"checkpoint", checkpoint.string()},
          {"model", config_->model},
          {"dataset", config_->dataset.name},
          {"global_step", loaded.meta().global_step},
          {"test_accuracy", result.accuracy},
          {"test_loss", result.loss},
          {"loss", config_->loss},
          {"samples", result.samples}};
}

}  // namespace tandem::train
