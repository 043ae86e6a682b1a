#pragma once
// Each subcommand registers itself and its flags on the app and returns the
// action to run if it was chosen.
#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::cli {

using Action = std::function<int()>;

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
// `bench allreduce` and `bench ps-apply`.
Command addBenchCommand(CLI::App& app);

}  // namespace tandem::cli
