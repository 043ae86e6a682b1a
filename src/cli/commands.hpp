#pragma once
// Each subcommand registers its flags on the app and returns the action to
// run if it was chosen.
#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::cli {

using Action = std::function<int()>;

Action addTrainCommand(CLI::App& app);
Action addEvalCommand(CLI::App& app);
Action addModelsCommand(CLI::App& app);

}  // namespace tandem::cli
