#pragma once
// `tandem train`'s flags: registered on a CLI11 command, then resolved into
// the run config. Apart from running, so that tests parse flags in-process
// (library tandem_cli_flags).
#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "train/config.hpp"

namespace tandem::cli {

// Each run-config option given on the command line: its texts, by field.
using GivenValues = std::map<std::string, std::vector<std::string>>;

// What parsing fills; shared, because CLI11 writes it after registration.
struct TrainFlags {
  std::shared_ptr<train::TrainConfig> config;  // --resume and --overwrite land here directly
  std::shared_ptr<GivenValues> given;          // the declared options (train/train_options.hpp)
  std::shared_ptr<cluster::ClusterFlags> cluster;
  std::shared_ptr<std::string> secret_file;
  std::shared_ptr<bool> insecure;
  std::shared_ptr<std::string> progress;  // auto | live | plain | records
};

// Registers every flag of `tandem train` on `cmd`.
TrainFlags addTrainFlags(CLI::App& cmd);

// After parsing: the given options' values over the defaults, each by its
// field's type. Throws InputError naming the flag.
void applyTrainOptions(const TrainFlags& flags);

// Once the cluster is known (`spec`; none: standalone): refuses a strict
// option the run's mode ignores, fills the optimizer's own defaults for
// momentum and weight decay where none was given, and with --resume takes
// the checkpoint's flags for the rest (a given flag must agree with it where
// it shapes the trajectory). Throws InputError naming the flag.
void completeTrainConfig(const TrainFlags& flags, const std::optional<cluster::ClusterSpec>& spec);

// `tandem train`'s arguments as launch and lab hold them (after `--`),
// parsed as `tandem train` parses them: the run config they give (defaults
// for what they leave out; a --resume checkpoint's flags are not read) and
// the options they give. Throws InputError naming a bad flag or value.
struct ParsedTrainArgs {
  train::TrainConfig config;
  GivenValues given;
  std::string secret_file;  // --secret-file, as given
  bool insecure = false;    // --insecure
};
ParsedTrainArgs parseTrainArgs(const std::vector<std::string>& args);

}  // namespace tandem::cli
