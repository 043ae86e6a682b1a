// tandem: data-parallel training of LibTorch models.
#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#include <zmq.h>

#include <unistd.h>

#include <functional>

#ifdef TANDEM_WITH_TCMALLOC
#include <gperftools/malloc_extension.h>
#endif

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/arg_style.hpp"
#include "cli/commands.hpp"
#include "cli/restart_in_place.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "train/blas_check.hpp"
#include "train/runtime_info.hpp"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace {

std::string versionText(const tandem::Environment& env) {
  int zmq_major = 0, zmq_minor = 0, zmq_patch = 0;
  zmq_version(&zmq_major, &zmq_minor, &zmq_patch);
  const auto runtime = tandem::train::runtimeInfo(env);
  const auto blas = tandem::train::describeBlas(runtime);
  return fmt::format("tandem {}\nLibTorch {}\nCUDA {}\nBLAS {}\nGloo: LibTorch's (c10d ProcessGroupGloo)\nZeroMQ {}.{}.{}",
                     TANDEM_VERSION, runtime.libtorch,
                     runtime.cuda_build.empty()
                         ? std::string("none (a CPU-only LibTorch)")
                         : fmt::format("{} (LibTorch's build), {} GPU(s) visible, CUDA library {}", runtime.cuda_build,
                                       runtime.cuda_devices, runtime.cuda_library),
                     blas.library, zmq_major, zmq_minor, zmq_patch);
}

// tcmalloc hands freed spans back to the kernel a little at a time, so
// a step's activations are faulted in afresh on later steps (resnet20,
// batch 64: about 175 minor faults per step, 20 with release off). A
// training process reuses the same sizes every step, so it keeps them. A
// user's TCMALLOC_RELEASE_RATE wins.
void keepFreedMemory(const tandem::Environment& env) {
#ifdef TANDEM_WITH_TCMALLOC
  if (!env.contains("TCMALLOC_RELEASE_RATE")) MallocExtension::instance()->SetMemoryReleaseRate(0);
#else
  (void)env;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // `tandem train ... | head`: a closed pipe must not kill a run that is
  // still training; writes to it fail instead, and are dropped.
  std::signal(SIGPIPE, SIG_IGN);
  // The one reading of the environment; every command is handed it.
  tandem::Environment env = tandem::captureEnvironment();
  keepFreedMemory(env);

  CLI::App app{"Tandem: data-parallel training of LibTorch models (standalone, all-reduce, parameter server)"};
  app.require_subcommand(0, 1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();
  app.set_version_flag("--version", std::function<std::string()>([&env] { return versionText(env); }));

  const tandem::cli::Command commands[] = {tandem::cli::addTrainCommand(app), tandem::cli::addEvalCommand(app),
                                           tandem::cli::addExportCommand(app),
                                           tandem::cli::addModelsCommand(app), tandem::cli::addPlanCommand(app),
                                           tandem::cli::addLaunchCommand(app), tandem::cli::addLabCommand(app),
                                           tandem::cli::addBenchCommand(app), tandem::cli::addSecretCommand(app),
                                           tandem::cli::addCoordinatorCommand(app),
                                           tandem::cli::addRemoteTaskCommand(app)};
  tandem::cli::collectUnknownArguments(app);

  tandem::cli::rememberCommandLine(argc, argv);  // train --restart-wait starts it again
  // Flags in either spelling: --task_index is --task-index.
  const std::vector<std::string> args = tandem::cli::normalizeFlagSpelling(argc, argv);
  std::vector<const char*> arg_pointers;
  for (const auto& a : args) arg_pointers.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    // Every parse error is bad input (CLI11's own codes are 100+).
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (argc <= 1) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  const CLI::App* where = nullptr;
  if (auto unknown = tandem::cli::unknownArguments(app, &where); !unknown.empty()) {
    std::fprintf(stderr, "error: %s\n", tandem::cli::unknownArgumentsMessage(*where, unknown).c_str());
    return 2;
  }
  // OpenBLAS chose its kernels when it was loaded, before main: to run the
  // faster set on this CPU, `train` starts itself again (same pid and
  // arguments) with OPENBLAS_CORETYPE set; `launch` sets it for its tasks.
  if (app.got_subcommand("train") || app.got_subcommand("launch")) {
    const bool selected = tandem::train::selectPreferredOpenBlasCore(env);
    if (selected && app.got_subcommand("train")) {
      ::execv("/proc/self/exe", argv);
      std::perror("tandem: re-executing with OPENBLAS_CORETYPE set failed; continuing with OpenBLAS's own choice");
    }
  }
  try {
    tandem::configureLogging(log_level);
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.action(env);
    }
    std::fprintf(stderr, "error: no command given\n%s", app.help().c_str());
    return 2;
  } catch (const tandem::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const tandem::Interrupted& e) {
    std::fprintf(stderr, "stopped: %s\n", e.what());
    return 130;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error (torch): %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
