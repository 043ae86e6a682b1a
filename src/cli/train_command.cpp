#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <map>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "cli/train_flags.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/local_address.hpp"
#include "cluster/device_placement.hpp"
#include "cluster/local_share.hpp"
#include "cluster/process_setup.hpp"
#include "core/logging.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "obs/progress.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/run_directory.hpp"
#include "cli/evaluator_task.hpp"
#include "cli/ps_task.hpp"
#include "cli/restart_in_place.hpp"
#include "train/strategy_factory.hpp"
#include "train/train_options.hpp"
#include "train/trainer.hpp"
#include "core/stop_request.hpp"
#include "net/job_security.hpp"

namespace tandem::cli {
namespace {

// SIGINT, SIGTERM and SIGUSR1 (a scheduler's preemption warning: Slurm's
// --signal, Kubernetes' SIGTERM) set the process's stop request
// (core/stop_request): the trainer checks it between steps, so a stopped
// run leaves a checkpoint and summary behind and exits 130, and the same
// command resumes it. A second signal kills (SIGUSR1's default: exit).
void onStopSignal(int signal) {
  if (stopFlag().exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// SIGUSR2: this worker leaves a live job at its next step boundary, and
// the others go on without it (core/stop_request's leave flag).
void onLeaveSignal(int) { leaveFlag().store(true); }

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model: standalone, or as one task of a cluster (cluster flags, TF_CONFIG, mpirun, srun or "
               "torchrun environment)");
  const TrainFlags flags = addTrainFlags(*cmd);

  return {cmd, [flags](const Environment& env) {
    const std::shared_ptr<train::TrainConfig>& config = flags.config;
    applyTrainOptions(flags);
    const std::string& progress = *flags.progress;
    config->progress = progress == "records" ? obs::ProgressStyle::kRecords
                       : progress == "live" || (progress == "auto" && obs::Progress::stderrIsTerminal())
                           ? obs::ProgressStyle::kLive
                           : obs::ProgressStyle::kPlain;
    for (int signal : {SIGINT, SIGTERM, SIGUSR1}) std::signal(signal, onStopSignal);
    std::signal(SIGUSR2, onLeaveSignal);
    // Where this process sits, its start (a restart in place says which)
    // and, in a cluster, its security: worked out once here, passed down.
    // A growing job's worker may lie beyond --worker-hosts.
    flags.cluster->max_workers = config->distributed.max_workers;
    const cluster::ProcessSetup process =
        cluster::setUpProcess(*flags.cluster, config->threads, env);
    const std::optional<cluster::ClusterSpec>& spec = process.spec;
    cluster::JobContext context(env);
    if (spec) context.setSecurity(net::resolveJobSecurity(*flags.secret_file, *flags.insecure, env));
    completeTrainConfig(flags, spec);
    if (const std::string& bind = config->distributed.bind; bind == "0.0.0.0" || bind == "::" || bind == "*") {
      TANDEM_LOG_WARN("--bind {}: this task's ports listen on every interface, reachable from any network this "
                      "machine is on",
                      bind);
    }
    config->threads = process.threads.threads;
    config->local_processes = process.threads.local_processes;
    config->local_rank = process.local.rank;
    if (spec && spec->role == cluster::Role::kEvaluator) return runEvaluatorTask(*config);
    if (spec && spec->role == cluster::Role::kPs) {
      // A stop signal reaches the workers too; the server keeps serving
      // until they have finished their last step.
      train::validate(*config);
      return runPsTask(*spec, *config, context.security());
    }
    nlohmann::json summary;
    try {
      train::Trainer trainer(*config, train::makeStrategy(spec, *config, context), context, &stopFlag());
      summary = trainer.run();
    } catch (const InputError&) {
      throw;
    } catch (const Departed& e) {
      TANDEM_LOG_WARN("{}", e.what());
      return 0;
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      // The trainer is gone, and with it this task's ports and connections.
      if (mayRestartInPlace(spec ? &*spec : nullptr, *config, context.start())) {
        restartInPlace(*spec, *config, context.start(), e.what());
      }
      throw;
    }
    // fputs, not fmt::print: a closed stdout (`| head`) is no failure of the run.
    if (summary.at("rank").get<int>() == 0) std::fputs((summary.dump(2) + "\n").c_str(), stdout);
    return summary.at("interrupted").get<bool>() ? 130 : 0;
  }};
}

}  // namespace tandem::cli
