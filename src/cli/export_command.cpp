#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "models/scripted_model.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/model_export.hpp"
#include "train/model_for_dataset.hpp"

namespace tandem::cli {

Command addExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint's model for Python: a state dict (torch.load) or a TorchScript module (torch.jit.load)");
  struct Options {
    std::string checkpoint;
    std::string out;
    std::string format = "auto";
    std::string data_dir;
  };
  auto opts = std::make_shared<Options>();
  cmd->add_option("--checkpoint", opts->checkpoint, "checkpoint file written by `tandem train`")->required();
  cmd->add_option("--out", opts->out, "file to write")->required();
  cmd->add_option("--format", opts->format,
                  "auto (torchscript for a TorchScript model, else state_dict), torchscript or state_dict")
      ->capture_default_str();
  cmd->add_option("--data-dir", opts->data_dir, "override the dataset directory stored in the checkpoint");
  return {cmd, [opts](const Environment&) {
    if (opts->format != "auto" && opts->format != "torchscript" && opts->format != "state_dict") {
      throw InputError(
          fmt::format("--format: unknown format '{}' (use auto, torchscript or state_dict)", opts->format));
    }
    train::LoadedCheckpoint checkpoint(opts->checkpoint);
    train::TrainConfig config = train::trainConfigFromJson(checkpoint.meta().config);
    if (!opts->data_dir.empty()) config.dataset.data_dir = opts->data_dir;
    // The model's input shape and class count come from its data.
    auto splits = data::openDataset(config.dataset);
    auto model = train::createModelFor(config, *splits.test);
    checkpoint.restore(*model, nullptr, /*restore_rng=*/false);
    std::string format = opts->format;
    if (format == "auto") format = models::isModelFile(config.model) ? "torchscript" : "state_dict";
    if (format == "torchscript") {
      train::exportTorchScript(*model, opts->out);
    } else {
      train::exportStateDict(*model, opts->out);
    }
    nlohmann::json out = {{"checkpoint", opts->checkpoint}, {"model", config.model},
                          {"global_step", checkpoint.meta().global_step}, {"format", format},
                          {"out", opts->out}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }};
}

}  // namespace tandem::cli
