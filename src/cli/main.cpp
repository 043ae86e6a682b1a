// tandem: data-parallel training of LibTorch models.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Tandem: data-parallel training of LibTorch models (standalone, all-reduce, parameter server)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();

  const tandem::cli::Command commands[] = {tandem::cli::addTrainCommand(app), tandem::cli::addEvalCommand(app),
                                           tandem::cli::addModelsCommand(app),
                                           tandem::cli::addLaunchCommand(app), tandem::cli::addBenchCommand(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    tandem::configureLogging(log_level);
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.action();
    }
    return 2;
  } catch (const tandem::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error (torch): %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
