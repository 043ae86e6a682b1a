#include <fmt/format.h>
#include <torch/torch.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "train/checkpoint_eval.hpp"

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
    train::CheckpointEvaluator evaluator(opts->data_dir, opts->batch_size);
    fmt::print("{}\n", evaluator.evaluate(opts->checkpoint).dump(2));
    return 0;
  }};
}

}  // namespace tandem::cli
