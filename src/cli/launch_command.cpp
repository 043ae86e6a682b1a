// `tandem launch`: a cluster of real processes, one per task, on this host
// or over ssh on several (--hosts): `tandem train` wired together through
// the cluster flags, or any program (a C++ or Python trainer using
// Tandem's API), told its place through TF_CONFIG and torchrun's
// variables, beside parameter servers launch runs. What the job is comes
// from launch_plan; this file runs it, and starts again what fails.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "cli/arg_style.hpp"
#include "cli/launch_plan.hpp"
#include "cli/launch_tasks.hpp"
#include "cli/commands.hpp"
#include "cli/train_flags.hpp"
#include "obs/timeline.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/coordinator.hpp"
#include "launch/failure_policy.hpp"
#include "launch/job_restart.hpp"
#include "launch/job_secret_file.hpp"
#include "launch/job_progress.hpp"
#include "launch/free_ports.hpp"
#include "launch/host_discovery.hpp"
#include "launch/process_group.hpp"
#include "launch/remote_task.hpp"
#include "cluster/local_address.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "net/job_security.hpp"
#include "train/checkpoint_format.hpp"
#include "train/config.hpp"
#include "train/run_directory.hpp"

#include <nlohmann/json.hpp>

namespace tandem::cli {
namespace {

std::atomic<int> g_forward_signal{0};

void onLaunchSignal(int signal) { g_forward_signal.store(signal); }

}  // namespace

void mergeTaskTimelines(const train::TrainConfig& config) {
  namespace fs = std::filesystem;
  if (!config.timeline) return;
  const std::string& out = config.out_dir;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("timeline-", 0) == 0 && entry.path().extension() == ".json") files.push_back(entry.path());
  }
  if (files.empty()) return;
  std::sort(files.begin(), files.end());
  try {
    obs::mergeTimelines(files, fs::path(out) / "timeline.json");
    std::fprintf(stderr, "launch: %zu task timeline(s) merged into %s\n", files.size(),
                 (fs::path(out) / "timeline.json").c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch: could not merge the timelines: %s\n", e.what());
  }
}

namespace {

int runLaunch(LaunchOptions o, const Environment& env) {
  LaunchPlan plan = planLaunch(o, env);
  const bool program = plan.program;
  const std::string& program_path = plan.program_path;
  const std::optional<ParsedTrainArgs>& train = plan.train;
  const std::optional<launch::TaskHosts>& placement = plan.placement;
  const bool replicated = plan.replicated;
  const bool serves_store = plan.serves_store;
  const std::string& store_host = plan.store_host;
  const launch::FailurePolicy policy(plan.policy);
  std::optional<launch::HostDiscovery> discovery;
  if (plan.discovers) {
    discovery.emplace(o.host_discovery_script, env, o.host, plan.min_workers, plan.max_workers);
  }
  // One pick for every port the job needs, so no two tasks get the same one:
  // a program's MASTER_PORT, or the store launch serves.
  const int listed_ports = placement ? 0 : o.workers + o.ps + (program ? 1 : 0);
  const std::vector<int> ports = launch::pickFreePorts(store_host, listed_ports + (serves_store ? 1 : 0));
  const int master_port = program && !placement ? ports[static_cast<size_t>(o.workers + o.ps)] : 0;
  const std::optional<cluster::HostPort> store_address =
      serves_store ? std::optional(cluster::HostPort{store_host, ports.back()}) : std::nullopt;
  auto hostList = [&o, &ports, &placement](int from, int count) {
    std::vector<std::string> hosts;
    if (placement) return hosts;  // no address is known ahead
    for (int i = from; i < from + count; ++i) hosts.push_back(cluster::HostPort{o.host, ports[static_cast<size_t>(i)]}.str());
    return hosts;  // HostPort::str brackets an IPv6 host
  };
  const std::vector<std::string> worker_list = hostList(0, o.workers);
  const std::vector<std::string> ps_list = hostList(o.workers, o.ps);
  const std::string worker_hosts = fmt::format("{}", fmt::join(worker_list, ","));
  const std::string ps_hosts = fmt::format("{}", fmt::join(ps_list, ","));

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // One progress line for the job instead of one per worker, unless the
  // user chose the workers' own.
  const bool job_progress = !program && !hasFlag(o.train_args, "--progress");
  // Each task counts the tasks on its host in the cluster flags and takes its
  // share of the cores itself (cluster/local_share.hpp), as under any other
  // launcher. A program's servers get only what a server needs.
  auto commonArguments = [&](const std::vector<std::string>& train_args) {
    std::vector<std::string> common = program ? std::vector<std::string>{"--out", o.ps_out} : train_args;
    // Another host's cores are its own to count.
    if (o.ps > 0 && !placement && !(train && train->given.contains("/distributed/ps_threads"))) {
      common.push_back("--ps-threads");
      common.push_back(std::to_string(std::max(1, cores / o.ps)));
    }
    if (o.ps > 0) {
      common.push_back(placement ? "--ps" : "--ps-hosts");
      common.push_back(placement ? std::to_string(o.ps) : ps_hosts);
    }
    if (store_address) {
      common.push_back("--coordinator");
      common.push_back(store_address->str());
      common.push_back("--external-coordinator");
    }
    if (job_progress) {
      common.push_back("--progress");
      common.push_back("records");
    }
    return common;
  };
  launch::JobProgress progress(/*live=*/::isatty(STDOUT_FILENO) == 1);

  // Forwarded to every task as received: each stops after its step with a checkpoint.
  for (int signal : {SIGINT, SIGTERM, SIGUSR1}) std::signal(signal, onLaunchSignal);
  // One secret for every attempt: a restarted task rejoins the same job.
  const launch::JobSecretFile secret(o.train_args, env);
  const Environment task_env = secret.forTasks(env);
  const std::optional<net::JobSecurity> store_security =
      store_address ? std::optional(net::resolveJobSecurity(train ? train->secret_file : "",
                                                             train && train->insecure, task_env))
                    : std::nullopt;
  const std::string self = launch::selfExecutable();
  const std::string out_dir = program ? o.ps_out : train->config.out_dir;
  // A task of a job over several hosts: told its place by torchrun's names,
  // and started over ssh unless its host is this one.
  const std::set<std::string> local_names = launch::localHostNames(o.host);
  const std::string cwd = std::filesystem::current_path().string();
  // launch's own secret file is on this host only: the agents get its line.
  const bool own_secret = placement && !secret.path().empty();
  const std::string greeting = launch::agentGreeting(own_secret ? net::secretLine(secret.keys()) : "");
  auto placedTask = [&](launch::ChildSpec child, bool server, int index, const std::vector<std::string>& common) {
    child.extra_env = placedTaskEnvironment(*placement, server, index);
    if (program && !server) {
      child.argv = o.train_args;
      child.argv.front() = program_path;
      child.extra_env.emplace_back("TANDEM_COORDINATOR", store_address->str());
      if (o.ps > 0) child.extra_env.emplace_back("TANDEM_PS_TASKS", std::to_string(o.ps));
    } else {
      child.argv = {self, "train"};
      child.argv.insert(child.argv.end(), common.begin(), common.end());
    }
    const std::string& host = (server ? placement->servers : placement->workers).at(static_cast<size_t>(index));
    child.label = fmt::format("{}@{}", child.name, host);
    if (local_names.contains(host)) return child;
    child.remote = launch::RemoteTask{.host = host,
                                      .ssh = o.ssh,
                                      .cwd = cwd,
                                      .agent = self,
                                      .greeting = greeting,
                                      .withheld = own_secret ? std::vector<std::string>{net::kSecretFileVariable}
                                                             : std::vector<std::string>{}};
    return child;
  };

  // 130 is how a task says it stopped on a signal and saved its state:
  // forwarded from here, or sent to the task itself (a scheduler's
  // preemption), when the others stop at the same step.
  bool forwarded = false;
  auto failed = [](const launch::ChildExit& e) { return launch::FailurePolicy::failed(e); };
  auto server = [](const launch::ChildExit& e) { return launch::FailurePolicy::isServer(e); };
  int restarts = 0;
  auto stops_job = [&](const launch::ChildExit& e) { return policy.stopsJob(e, restarts); };
  // Each exit while the group runs: a spared worker is gone from the job's line.
  // Once a worker finished or the job is stopping, it grows no more; nor
  // after a worker refused its input, which a new one would only repeat.
  bool ending = false;
  std::optional<std::string> bad_input;
  // Workers the discovery script's fewer slots asked to leave (SIGUSR2),
  // and the pids of those that did: their exit 0 does not end the job.
  std::set<std::string> asked_to_leave;
  std::set<pid_t> left;
  auto on_exit = [&](const launch::ChildExit& e) {
    if (asked_to_leave.erase(e.name) > 0 && !failed(e)) {
      left.insert(e.pid);
      progress.forget(e.name);
      std::fprintf(stderr, "launch: %s left the job; the others go on without it\n", e.name.c_str());
      return false;
    }
    const bool stops = policy.endsJob(e, restarts, ending, forwarded);
    // Gone from the job's line, unless the job is stopping: then the line
    // keeps the last step each reported (a gang restart's record reads it).
    if (failed(e) && !stops && !ending) progress.forget(e.name);
    ending = ending || stops || !failed(e);
    if (replicated && server(e) && failed(e)) {
      std::fprintf(stderr, "launch: %s; its chunks go on at their other replica (--ps-replicas 2)\n",
                   e.describe().c_str());
      try {
        launch::appendRestartRecord((std::filesystem::path(out_dir) / "restarts.jsonl").string(),
                                    launch::replicaLossRecord(e.describe(), progress.latestStep()));
      } catch (const Error& error) {
        std::fprintf(stderr, "launch: %s\n", error.what());
      }
    }
    if (launch::FailurePolicy::badInput(e) && !bad_input) bad_input = e.describe();
    return stops;
  };
  // Bad input stays bad input: 2 when every task that failed on its own
  // said so (a fingerprint mismatch fails them all with 2).
  auto allBadInput = [&](const launch::GroupResult& result) {
    for (const auto& e : result.exits) {
      const bool own_failure = !e.stopped_by_group && failed(e);
      if (own_failure && !launch::FailurePolicy::badInput(e)) return false;
    }
    return true;
  };

  std::set<pid_t> replaced;  // failed workers whose replacement joined
  auto writeRecord = [&](const launch::RestartRecord& record) {
    std::fprintf(stderr, "launch: %s\n", record.describe().c_str());
    try {
      launch::appendRestartRecord((std::filesystem::path(out_dir) / "restarts.jsonl").string(), record);
    } catch (const Error& e) {
      std::fprintf(stderr, "launch: %s\n", e.what());
    }
  };
  // A replicated server started again: its chunks are copied from their
  // other holder (sync: at a step boundary; async and SSP: between two of
  // each chunk's applies, by that holder). One the job ended without is
  // stopped once the workers are gone.
  std::set<std::string> server_replacements;
  auto replace = [&](const launch::ChildExit& e, launch::ChildSpec& again) {
    const auto replacement = policy.replaces(e, restarts, ending, forwarded);
    if (replacement == launch::FailurePolicy::Replacement::kNone) return false;
    const bool server_back = replacement == launch::FailurePolicy::Replacement::kServer;
    // It joins the running job: it must not start the job again or claim --out.
    if (store_address) again.extra_env.emplace_back("TANDEM_RESTART", "joins_running=1");
    if (server_back) server_replacements.insert(e.name);
    launch::RestartRecord record;
    record.restart = ++restarts;
    record.max_restarts = o.max_restarts;
    record.failure = e.describe();
    record.replaced = e.name;
    record.last_step = progress.latestStep();
    writeRecord(record);
    replaced.insert(e.pid);
    return true;
  };

  std::vector<std::string> train_args = o.train_args;
  launch::GroupResult result;
  for (;;) {
    const bool first_attempt = restarts == 0;
    const std::vector<std::string> common = commonArguments(train_args);
    {
      // Fresh for each start of the job: a gang restart finds no keys of the last.
      std::optional<cluster::CoordinatorServer> store;
      if (store_address) store.emplace(store_address->host, store_address->port, *store_security);
      launch::ProcessGroup group(task_env);
      if (job_progress) {
        group.setLineHook([&progress](const std::string& child, std::string_view line) {
          return progress.onLine(child, line);
        });
        group.setStatusLine([&progress] { return progress.statusLine(); });
      }
      auto startTask = [&](const std::string& job, int index) {
        launch::ChildSpec child;
        child.name = fmt::format("{} {}", job, index);
        if (placement) {
          group.start(placedTask(std::move(child), job == "ps", index, common));
          return;
        }
        if (program && job == "worker") {
          child.argv = train_args;
          child.argv.front() = program_path;
          child.extra_env = programEnvironment(worker_list, ps_list, index, o.host, master_port,
                                               std::max(1, cores / o.workers), env);
          if (store_address) {
            child.extra_env.emplace_back("TANDEM_COORDINATOR", store_address->str());
            child.extra_env.emplace_back("TANDEM_MIN_WORKERS", std::to_string(o.min_workers));
            if (o.max_workers > 0) child.extra_env.emplace_back("TANDEM_MAX_WORKERS", std::to_string(o.max_workers));
          }
          group.start(child);
          return;
        }
        child.argv = {self, "train"};
        child.argv.insert(child.argv.end(), common.begin(), common.end());
        for (std::string extra : {std::string("--worker-hosts"), worker_hosts, std::string("--job-name"), job,
                                  std::string("--task-index"), std::to_string(index)}) {
          child.argv.push_back(extra);
        }
        group.start(child);
      };
      // Fills the slots the discovery script lists.
      auto grow = [&] {
        if (!discovery || ending || forwarded) return;
        if (bad_input) {
          discovery->sayOnce(fmt::format("{} (bad input): the job grows no more", *bad_input));
          return;
        }
        const launch::DiscoveryPlan plan = discovery->plan(group.running(), Clock::now());
        for (int id : plan.leave) {
          const std::string name = cluster::taskName(cluster::Role::kWorker, id);
          group.signal(name, SIGUSR2);
          asked_to_leave.insert(name);
        }
        for (int id : plan.start) startTask("worker", id);
      };
      for (int i = 0; i < o.ps; ++i) startTask("ps", i);
      for (int i = 0; i < o.workers; ++i) startTask("worker", i);
      if (first_attempt && placement) {
        std::fprintf(stderr, "launch: %d worker(s) and %d server(s) on %s, over ssh where not this host; the "
                     "job's store at %s\n", o.workers, o.ps, (o.hosts.empty() ? o.hostfile : o.hosts).c_str(),
                     store_address->str().c_str());
      } else if (first_attempt) {
        std::fprintf(stderr, "launch: %d worker(s) at %s\n", o.workers, worker_hosts.c_str());
        if (o.ps > 0) std::fprintf(stderr, "launch: %d parameter server(s) at %s\n", o.ps, ps_hosts.c_str());
      }
      // Servers started again that outlive every worker by 5 s were never
      // taken back (the job ended first): they are stopped.
      std::optional<Clock::time_point> workers_gone;
      auto stopUntakenServers = [&] {
        if (server_replacements.empty()) return;
        const std::vector<std::string> running = group.running();
        const auto worker = [](const std::string& name) { return name.rfind("worker ", 0) == 0; };
        if (std::any_of(running.begin(), running.end(), worker)) return;
        if (!workers_gone) workers_gone = Clock::now();
        if (Clock::now() - *workers_gone < std::chrono::seconds(5)) return;
        for (const auto& name : running) {
          if (server_replacements.erase(name) == 0) continue;
          std::fprintf(stderr, "launch: the new %s was not taken back before the job ended; stopping it\n",
                       name.c_str());
          group.signal(name, SIGTERM);
        }
      };
      result = group.wait(
          std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000)),
          [&forwarded, &grow, &stopUntakenServers] {
            int signal = g_forward_signal.exchange(0);
            if (signal > 0) forwarded = true;
            grow();
            stopUntakenServers();
            return signal;
          },
          on_exit, replace);
    }  // the group's relay thread has delivered every line by here
    // A live job spares every worker, so the job ended well only if one of
    // them finished it: when the last fail (too few left), so does the job.
    if (store_address && result.ok) {
      const bool finished = std::any_of(result.exits.begin(), result.exits.end(), [&left](const launch::ChildExit& e) {
        return e.name.rfind("worker ", 0) == 0 && !e.signaled && (e.exit_code == 0 || e.exit_code == 130) &&
               !left.contains(e.pid);
      });
      if (!finished) {
        result.ok = false;
        // The worker that said why the job stopped, rather than one killed before.
        const launch::ChildExit* culprit = nullptr;
        for (const auto& e : result.exits) {
          if (!failed(e) || replaced.count(e.pid) > 0) continue;
          if (culprit == nullptr || (culprit->signaled && !e.signaled)) culprit = &e;
        }
        if (culprit != nullptr) result.first_failure = culprit->describe();
      }
    }
    if (result.ok) {
      for (const auto& e : result.exits) {
        if (failed(e) && !stops_job(e) && replaced.count(e.pid) == 0 && !server(e)) {
          std::fprintf(stderr, "launch: %s; training went on without it (--on-worker-failure continue)\n",
                       e.describe().c_str());
        }
      }
      break;
    }
    std::fprintf(stderr, "launch: %s; the other tasks were stopped\n", result.first_failure.c_str());
    if (allBadInput(result)) return 2;
    if (forwarded || restarts >= o.max_restarts) return 1;
    // Gang restart: every task again, from OUT's newest checkpoint.
    launch::RestartRecord record;
    record.restart = ++restarts;
    record.max_restarts = o.max_restarts;
    record.failure = result.first_failure;
    record.last_step = progress.latestStep();
    std::optional<std::filesystem::path> latest;
    try {
      latest = train::latestCheckpoint(out_dir);
      // step-N.ckpt names its step; the final checkpoint.ckpt only holds it.
      if (latest) {
        record.resume_step = train::checkpointStep(*latest);
        if (!record.resume_step) record.resume_step = train::readCheckpointFile(*latest).meta.global_step;
      }
    } catch (const InputError& e) {
      std::fprintf(stderr, "launch: %s; the restart starts as the job first did\n", e.what());
      latest.reset();
    }
    if (!program) train_args = launch::restartArguments(o.train_args, latest.has_value());
    writeRecord(record);
    progress.restart();
  }
  if (train) mergeTaskTimelines(train->config);
  // The job stopped on a signal when its chief did (one task of an async
  // job may stop alone while the rest finish).
  for (const auto& e : result.exits) {
    if (e.exit_code == 130 && (forwarded || e.name == "worker 0")) {
      std::fprintf(stderr, "launch: stopped by signal; worker 0 saved a checkpoint\n");
      return 130;
    }
  }
  return 0;
}

}  // namespace

Command addLaunchCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Run a local cluster: N worker (and K parameter-server) processes of `tandem train` (args after --)");
  auto options = std::make_shared<LaunchOptions>();
  cmd->add_option("--workers,--nproc-per-node,-n,--np", options->workers,
                  "worker processes (with --hosts: default every slot)")
      ->capture_default_str()
      ->each([options](const std::string&) { options->workers_given = true; });
  cmd->add_option("--ps", options->ps, "parameter-server processes")->capture_default_str();
  cmd->add_option("--host", options->host,
                  "address the tasks listen on; with --hosts, where launch serves the job's store (default: this "
                  "host's address toward the others)")
      ->capture_default_str()
      ->each([options](const std::string&) { options->host_given = true; });
  cmd->add_option("--hosts,-H", options->hosts,
                  "a job over several hosts, as horovodrun's -H: host:slots,... (workers fill the slots in order; "
                  "--ps K servers go to the last hosts); tasks on other hosts start over ssh");
  cmd->add_option("--hostfile", options->hostfile,
                  "the hosts in a file, one a line: 'host slots=N' (Open MPI's, Horovod's), 'host:N' or 'host'");
  cmd->add_option("--ssh-port,-p", options->ssh.port, "with --hosts: the port of the hosts' sshd (default: ssh's)");
  cmd->add_option("--ssh-identity-file,-i", options->ssh.identity_file, "with --hosts: ssh's private key file");
  cmd->add_option("--ssh-option", options->ssh.options,
                  "with --hosts: an ssh option, passed as -o OPTION (e.g. UserKnownHostsFile=FILE); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--grace", options->grace_s, "seconds between SIGTERM and SIGKILL when stopping the others")
      ->capture_default_str();
  cmd->add_option("--max-restarts", options->max_restarts,
                  "when a task fails, stop the job and start every task again from the newest checkpoint in "
                  "--out, up to this many times; in parameter-server jobs a failed worker, worker 0 included, is "
                  "started again alone and joins the running job (records in OUT/restarts.jsonl)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--on-worker-failure", options->on_worker_failure,
                  "when a worker other than 0 fails: stop the job, or continue without it (auto: continue for "
                  "async parameter servers, stop otherwise)")
      ->check(CLI::IsMember({"auto", "stop", "continue"}))
      ->capture_default_str();
  cmd->add_option("--min-workers", options->min_workers,
                  "with a program: an elastic job (hvd.elastic.run) that goes on while at least N workers live; "
                  "launch serves its store and, with --max-restarts, starts a dead worker again to join it")
      ->capture_default_str();
  cmd->add_option("--max-workers", options->max_workers,
                  "with a program and --min-workers: the elastic job grows to M workers as a discovery script finds "
                  "room (Horovod's --max-np)");
  cmd->add_option("--host-discovery-script", options->host_discovery_script,
                  "a live all-reduce job that grows (tandem train's --max-workers M, or launch's for a program): this "
                  "executable is run every "
                  "second and prints the hosts with room, one host[:slots] a line (Horovod's format); launch starts "
                  "workers on this host's slots, up to M, and each joins the running job at a step boundary");
  cmd->add_option("--ps-out", options->ps_out,
                  "with a program: directory under which the parameter servers write ps/ps-N/summary.json")
      ->capture_default_str();
  cmd->add_option("train_args", options->train_args,
                  "after --: arguments for `tandem train`, or a program and its arguments");
  cmd->footer("Examples:\n  tandem launch --workers 2 -- --model cnn --epochs 1 --out runs/two\n"
              "  tandem launch --ps 1 --workers 4 -- --ps-mode async --out runs/ps\n"
              "  tandem launch --hosts h1:4,h2:4 -- --model cnn --out runs/two-hosts   # over ssh\n"
              "  tandem launch --workers 2 -- ./my_trainer --epochs 3      # any program: TF_CONFIG, RANK, "
              "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT are set");
  return {cmd, [options](const Environment& env) { return runLaunch(*options, env); }};
}

}  // namespace tandem::cli
