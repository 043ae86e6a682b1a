#pragma once
// Each subcommand registers itself and its flags on the app and returns the
// action to run if it was chosen.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>
#include "core/environment.hpp"
#include "train/config.hpp"

namespace tandem::cli {

// Runs with the environment main captured: nothing below reads its own.
using Action = std::function<int(const Environment& env)>;

struct Command {
  CLI::App* app;
  Action action;
};

Command addTrainCommand(CLI::App& app);
Command addEvalCommand(CLI::App& app);
Command addExportCommand(CLI::App& app);
Command addModelsCommand(CLI::App& app);
// `plan`: the comm-bound optimum of a layout (plan/comm_model.hpp).
Command addPlanCommand(CLI::App& app);
Command addLaunchCommand(CLI::App& app);
// `lab`: a cluster of emulated hosts in network namespaces (lab/).
Command addLabCommand(CLI::App& app);

// A run with --timeline (`config.timeline`): every task wrote its own file
// under the run directory; merges them into OUT/timeline.json.
void mergeTaskTimelines(const train::TrainConfig& config);
// `bench allreduce` and `bench ps-apply`.
Command addBenchCommand(CLI::App& app);
// `secret new FILE` (net/job_security.hpp).
Command addSecretCommand(CLI::App& app);
// `coordinator`: a job's store in a process of its own (cluster/coordinator.hpp).
Command addCoordinatorCommand(CLI::App& app);
// `remote-task`: the agent of a task `launch --hosts` runs over ssh (hidden).
Command addRemoteTaskCommand(CLI::App& app);

}  // namespace tandem::cli
