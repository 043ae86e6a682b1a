// tandem: data-parallel training of LibTorch models.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <map>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Tandem: data-parallel training of LibTorch models (standalone, all-reduce, parameter server)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();

  std::map<CLI::App*, tandem::cli::Action> actions;
  auto add = [&](tandem::cli::Action (*adder)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto action = adder(app);
    actions[app.get_subcommands({})[before]] = std::move(action);
  };
  add(tandem::cli::addTrainCommand);
  add(tandem::cli::addEvalCommand);
  add(tandem::cli::addModelsCommand);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    tandem::configureLogging(log_level);
    for (auto& [sub, action] : actions) {
      if (sub->parsed()) return action();
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
