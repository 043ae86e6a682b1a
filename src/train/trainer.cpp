#include "train/trainer.hpp"

#include <torch/torch.h>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "models/scripted_model.hpp"
#include "train/training_run.hpp"

namespace tandem::train {

namespace {

void requireSame(const nlohmann::json& a, const nlohmann::json& b, const char* field, const std::string& checkpoint) {
  if (a != b) {
    throw InputError(fmt::format("checkpoint {}: {} differs: checkpoint has {}, this run has {}", checkpoint, field,
                                 b.dump(), a.dump()));
  }
}

}  // namespace

nlohmann::json runFingerprint(const TrainConfig& c, const torch::nn::Module& model, int64_t dataset_size,
                              int64_t start_step, int world) {
  nlohmann::json params = nlohmann::json::object();
  auto describe = [](const torch::Tensor& t) {
    return fmt::format("{}[{}]", std::string(c10::toString(t.scalar_type())), fmt::join(t.sizes(), ","));
  };
  for (const auto& item : model.named_parameters()) params[item.key()] = describe(item.value());
  for (const auto& item : model.named_buffers()) params[item.key()] = describe(item.value());
  const nlohmann::json config = toJson(c);
  // A model file is compared by content, so that hosts may keep it at
  // different paths; "about" is not compared, only shown in a mismatch.
  const bool file = models::isModelFile(c.model);
  return {{"model", file ? "torchscript " + models::modelFileDigest(c.model) : c.model},
          {"about", {{"model", c.model}}},
          {"loss", c.loss},
          {"tensors", params},
          {"dataset", c.dataset.name},
          {"dataset_size", dataset_size},
          // What each worker makes of its samples must agree too.
          {"input", {{"augment", c.dataset.augment}, {"image_size", c.dataset.image_size},
                     {"normalize_mean", c.dataset.normalize_mean}, {"normalize_std", c.dataset.normalize_std}}},
          {"batch_size", c.batch_size},
          {"accumulate", c.accumulate},
          {"optimizer", config["optimizer"]},
          {"lr_schedule", config["lr"]},
          {"seed", c.seed},
          {"epochs", c.epochs},
          {"max_steps", c.max_steps},
          {"start_step", start_step},
          {"workers", world}};
}

void checkResumeCompatible(const TrainConfig& current, const TrainConfig& saved, const std::string& checkpoint) {
  requireSame(current.model, saved.model, "model", checkpoint);
  requireSame(current.model_options.mlp_widths, saved.model_options.mlp_widths, "mlp widths", checkpoint);
  requireSame(current.dataset.name, saved.dataset.name, "dataset", checkpoint);
  requireSame(current.batch_size, saved.batch_size, "batch size", checkpoint);
  requireSame(current.optimizer.name, saved.optimizer.name, "optimizer", checkpoint);
  if (current.seed != saved.seed) {
    TANDEM_LOG_WARN("resuming with seed {} but the checkpoint used {}: the data order will differ", current.seed,
                    saved.seed);
  }
}

Trainer::Trainer(TrainConfig config, std::unique_ptr<Strategy> strategy, cluster::JobContext& context,
                 const std::atomic<bool>* stop, TrainerParts parts)
    : config_(std::move(config)),
      strategy_(std::move(strategy)),
      context_(context),
      stop_(stop),
      parts_(std::move(parts)) {
  validate(config_, {parts_.model != nullptr, parts_.data.has_value(), static_cast<bool>(parts_.loss)});
  TANDEM_ENFORCE(strategy_ != nullptr);
}

// The run's outline; each part is TrainingRun's (train/training_run.hpp).
nlohmann::json Trainer::run() {
  TrainingRun run(config_, *strategy_, context_, stop_, parts_);  // threads, data, model, device, schedule; a resume
  run.join();  // the cluster agrees on the run; every replica starts from the same parameters
  if (run.finishedBefore()) return run.summaryOfFinishedRun();
  run.openInputAndLogs();
  while (run.stepsLeft()) run.step();  // input, forward+backward, synchronize, update, cadences
  run.end();  // the job's last update, the final checkpoint and evaluation
  return run.summary();
}

}  // namespace tandem::train
