#include "cli/launch_plan.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/arg_style.hpp"
#include "cli/launch_tasks.hpp"
#include "cluster/local_address.hpp"
#include "cluster/quorum_messages.hpp"
#include "core/error.hpp"
#include "launch/host_discovery.hpp"
#include "train/config.hpp"

namespace tandem::cli {
namespace {

// Async PS training goes on without a dead worker (the servers and the
// others carry its share), and so does all-reduce with a live membership
// (--min-workers); every other mode needs every worker for each step.
// (`train`: the run config of `tandem train` tasks; none for a program).
bool continuesAfterWorkerFailure(const LaunchOptions& o, const std::optional<ParsedTrainArgs>& train) {
  if (o.on_worker_failure != "auto") return o.on_worker_failure == "continue";
  if (!train) return o.min_workers > 0;
  if (o.ps == 0) return train::wantsLiveMembership(train->config.distributed, o.workers);
  return train::psModeOf(train->config.distributed) == Mode::PsAsync;
}

// --hosts or --hostfile: where each task runs. Without --workers the job
// fills every slot.
std::optional<launch::TaskHosts> placeOnHosts(LaunchOptions& o) {
  if (o.hosts.empty() && o.hostfile.empty()) return std::nullopt;
  if (!o.hosts.empty() && !o.hostfile.empty()) throw InputError("--hosts and --hostfile: give one or the other");
  std::vector<launch::HostSlots> hosts;
  if (!o.hosts.empty()) {
    hosts = launch::parseHostList(o.hosts);
  } else {
    std::ifstream in(o.hostfile);
    if (!in) throw InputError(fmt::format("--hostfile {}: cannot read it", o.hostfile));
    std::stringstream text;
    text << in.rdbuf();
    hosts = launch::parseHostfile(text.str(), o.hostfile);
  }
  if (!o.workers_given) {
    o.workers = 0;
    for (const auto& h : hosts) o.workers += h.slots;
  }
  if (!o.host_discovery_script.empty() || o.min_workers > 0) {
    throw InputError(fmt::format("{} with --hosts: not built; a job over several hosts has a fixed list",
                                 o.min_workers > 0 ? "--min-workers" : "--host-discovery-script"));
  }
  return launch::placeTasks(hosts, o.workers, std::max(0, o.ps));
}

// Where a job over several hosts serves its store: --host, else this
// machine's address toward the first other host (loopback if none).
std::string storeHostFor(const LaunchOptions& o, const launch::TaskHosts& placed) {
  if (o.host_given) return o.host;
  const std::set<std::string> local = launch::localHostNames(o.host);
  for (const auto& host : placed.workers) {
    if (!local.contains(host)) return cluster::localAddressToward({host, 22});
  }
  return o.host;
}
}  // namespace

LaunchPlan planLaunch(LaunchOptions& o, const Environment& env) {
  LaunchPlan plan;
  // torchrun habit: `launch ... -- train --model x` names the subcommand again.
  if (!o.train_args.empty() && o.train_args.front() == "train") o.train_args.erase(o.train_args.begin());
  // `launch -- ./trainer ...` runs a program; `-- --model x` and `-- train ...` run `tandem train`.
  plan.program = !o.train_args.empty() && namesProgram(o.train_args.front());
  const bool program = plan.program;
  if (program) plan.program_path = resolveProgram(o.train_args.front(), env);
  // The tasks' run config, parsed as they will parse it: a bad flag is
  // named once, here, instead of by every task.
  if (!program) plan.train = parseTrainArgs(o.train_args);
  const std::optional<ParsedTrainArgs>& train = plan.train;
  plan.placement = placeOnHosts(o);
  const std::optional<launch::TaskHosts>& placement = plan.placement;
  if (o.workers < 1) throw InputError(fmt::format("--workers: must be >= 1, got {}", o.workers));
  if (o.ps < 0) throw InputError(fmt::format("--ps: must be >= 0, got {}", o.ps));
  if (o.min_workers != 0 && !program) {
    throw InputError("--min-workers: launch takes it for a program (hvd.elastic); for tandem train pass it after --");
  }
  if (o.min_workers < 0 || o.min_workers > o.workers) {
    throw InputError(fmt::format("--min-workers {}: expected 1 to the job's {} workers", o.min_workers, o.workers));
  }
  if (o.min_workers > 0 && o.ps > 0) {
    throw InputError("--min-workers with --ps: not built; an elastic program sums over all-reduce only");
  }
  if (o.max_workers != 0 && !program) {
    throw InputError("--max-workers: launch takes it for a program (hvd.elastic); for tandem train pass it after --");
  }
  if (o.max_workers != 0 && o.min_workers == 0) {
    throw InputError(fmt::format("--max-workers {}: only an elastic program grows; pass --min-workers too",
                                 o.max_workers));
  }
  if (o.max_workers != 0 && (o.max_workers < o.workers || o.max_workers > cluster::kMaxQuorumWorkers)) {
    throw InputError(fmt::format("--max-workers {}: expected the job's {} workers to {}", o.max_workers, o.workers,
                                 cluster::kMaxQuorumWorkers));
  }
  // All-reduce whose members may change: tandem train's --min-workers, or an elastic program's.
  const bool live = plan.live = (train && o.ps == 0 && train::wantsLiveMembership(train->config.distributed, o.workers)) ||
                    (program && o.min_workers > 0);
  if (o.on_worker_failure == "continue" && o.ps == 0 && !live) {
    throw InputError("--on-worker-failure continue: all-reduce needs every worker for every step unless the job "
                     "has a live membership (--min-workers N); async parameter-server training goes on too");
  }
  // Named once, here, rather than by every task.
  if (train && o.ps == 0) train::quorumOptions(train->config.distributed, o.workers);
  if (train && o.ps > 0) train::checkPsReplicas(train->config.distributed, o.ps);
  // A server's death leaves its chunks at their other replica.
  plan.replicated = train && o.ps > 0 && train->config.distributed.ps_replicas > 1;
  // Workers beyond --workers, up to this many, join as the discovery script finds room.
  const int max_workers = plan.max_workers = program                ? std::max(o.workers, o.max_workers)
                          : train && o.ps == 0 ? std::max(o.workers, train->config.distributed.max_workers)
                                               : o.workers;
  const bool discovers = plan.discovers = !o.host_discovery_script.empty();
  // Below --workers it may shrink too (a train job's workers leave on
  // SIGUSR2; an elastic program's are never asked: 0).
  const int min_workers = plan.min_workers = program ? 0
                          : train && train->config.distributed.min_workers > 0 ? train->config.distributed.min_workers
                                                                               : o.workers;
  if (discovers && (o.ps > 0 || (max_workers <= o.workers && (program || min_workers >= o.workers)))) {
    throw InputError(fmt::format("--host-discovery-script: only a live all-reduce job grows or shrinks; pass "
                                 "--max-workers above or --min-workers below --workers {} {}",
                                 o.workers, program ? "and --min-workers to launch" : o.ps > 0 ? "after -- and no --ps"
                                                                                              : "after --"));
  }
  if (discovers && ::access(o.host_discovery_script.c_str(), X_OK) != 0) {
    throw InputError(fmt::format("--host-discovery-script {}: not an executable file", o.host_discovery_script));
  }
  for (const char* flag : {"--worker-hosts", "--ps-hosts", "--job-name", "--task-index", "--task-id", "--coordinator",
                           "--external-coordinator"}) {
    if (!program && hasFlag(o.train_args, flag)) {
      throw InputError(fmt::format("{}: launch sets the cluster flags itself; remove it from the train arguments", flag));
    }
  }
  if (train && train->given.contains("/distributed/restart_wait_s")) {
    throw InputError("--restart-wait: launch restarts the tasks itself; use launch --max-restarts N instead");
  }
  // A parameter-server job's failed workers are started again alone and
  // join the running job: async and SSP (DiLoCo's too) where their
  // predecessor stopped, sync at a step boundary. Worker 0 is then the
  // chief again, since the servers hold the job; not DiLoCo's, whose chief
  // holds the outer optimizer's state. Launch's tasks share one host, so a
  // sync job has no host groups to change.
  const Mode ps_mode = train && o.ps > 0 ? train::psModeOf(train->config.distributed) : Mode::AllReduce;
  const bool diloco = train && train->config.distributed.local_steps > 0;
  const bool chief_comes_back = usesServers(ps_mode) && !diloco;
  plan.policy = launch::JobKind{.live = live,
                                      .elastic_ps = ps_mode == Mode::PsAsync || ps_mode == Mode::Ssp || chief_comes_back,
                                      .chief_comes_back = chief_comes_back,
                                      .replicated = plan.replicated,
                                      .servers_come_back = plan.replicated && !diloco,
                                      .carry_on = continuesAfterWorkerFailure(o, train),
                                      .max_restarts = o.max_restarts};
  // A job whose worker 0 may die serves its store from launch, not from worker 0.
  // So does a job over several hosts, whose tasks' ports are their own
  // business: each binds a free one and publishes it there.
  plan.serves_store = live || chief_comes_back || placement;
  plan.store_host = placement ? storeHostFor(o, *placement) : o.host;
  return plan;
}

}  // namespace tandem::cli
