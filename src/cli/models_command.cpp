#include <fmt/format.h>

#include "cli/commands.hpp"
#include "models/registry.hpp"

namespace tandem::cli {

Command addModelsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List every registered model with its parameter count");
  return {cmd, [](const Environment&) {
    fmt::print("{:<14} {:>12}  {:<16} {}\n", "model", "parameters", "default input", "description");
    for (const auto& info : models::listModels()) {
      auto model = models::createModel(info.name, info.default_input);
      const auto& in = info.default_input;
      fmt::print("{:<14} {:>12}  {:<16} {}\n", info.name, models::countParameters(*model),
                 fmt::format("{}x{}x{}/{}", in.channels, in.height, in.width, in.num_classes), info.description);
    }
    return 0;
  }};
}

}  // namespace tandem::cli
