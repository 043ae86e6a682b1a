#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/evaluator.hpp"
#include "train/model_for_dataset.hpp"

namespace tandem::cli {

Command addEvalCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Report a checkpoint's test accuracy and loss (JSON on stdout)");
  struct Options {
    std::string checkpoint;
    std::string data_dir;
    int64_t batch_size = 500;
    int threads = 0;
  };
  auto opts = std::make_shared<Options>();
  cmd->add_option("--checkpoint", opts->checkpoint, "checkpoint file written by `tandem train`")->required();
  cmd->add_option("--data-dir", opts->data_dir, "override the dataset directory stored in the checkpoint");
  cmd->add_option("--batch-size", opts->batch_size, "evaluation batch size")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "torch threads (0: all cores)")->capture_default_str();
  return {cmd, [opts](const Environment&) {
    if (opts->batch_size <= 0) throw InputError("--batch-size: must be positive");
    if (opts->threads > 0) torch::set_num_threads(opts->threads);
    train::LoadedCheckpoint checkpoint(opts->checkpoint);
    train::TrainConfig config = train::trainConfigFromJson(checkpoint.meta().config);
    if (!opts->data_dir.empty()) config.dataset.data_dir = opts->data_dir;
    config.dataset.augment = false;
    auto splits = data::openDataset(config.dataset);
    auto model = train::createModelFor(config, *splits.test);
    checkpoint.restore(*model, nullptr, /*restore_rng=*/false);
    auto result = train::evaluate(*model, *splits.test, opts->batch_size, train::lossFunction(config.loss));
    nlohmann::json out = {{"checkpoint", opts->checkpoint},
                          {"model", config.model},
                          {"dataset", config.dataset.name},
                          {"global_step", checkpoint.meta().global_step},
                          {"test_accuracy", result.accuracy},
                          {"test_loss", result.loss},
                          {"loss", config.loss},
                          {"samples", result.samples}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }};
}

}  // namespace tandem::cli
