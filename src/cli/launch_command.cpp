// `tandem launch`: a local cluster of real `tandem train` processes, one per
// task, wired together through the classic cluster flags.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "cli/commands.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/process_group.hpp"
#include "core/error.hpp"

namespace tandem::cli {
namespace {

std::atomic<int> g_forward_signal{0};

void onLaunchSignal(int signal) { g_forward_signal.store(signal); }

struct LaunchOptions {
  int workers = 2;
  int ps = 0;
  std::string host = "127.0.0.1";
  double grace_s = 10;
  std::vector<std::string> train_args;
};

bool hasFlag(const std::vector<std::string>& args, const std::string& flag) {
  for (const auto& a : args) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

int runLaunch(const LaunchOptions& o) {
  if (o.workers < 1) throw InputError(fmt::format("--workers: must be >= 1, got {}", o.workers));
  if (o.ps < 0) throw InputError(fmt::format("--ps: must be >= 0, got {}", o.ps));
  for (const char* flag : {"--worker_hosts", "--ps_hosts", "--job_name", "--task_index", "--task_id", "--coordinator"}) {
    if (hasFlag(o.train_args, flag)) {
      throw InputError(fmt::format("{}: launch sets the cluster flags itself; remove it from the train arguments", flag));
    }
  }
  auto hostList = [&o](int count) {
    std::vector<std::string> hosts;
    for (int i = 0; i < count; ++i) hosts.push_back(cluster::HostPort{o.host, cluster::pickFreePort(o.host)}.str());
    return fmt::format("{}", fmt::join(hosts, ","));  // HostPort::str brackets an IPv6 host
  };
  const std::string worker_hosts = hostList(o.workers);
  const std::string ps_hosts = o.ps > 0 ? hostList(o.ps) : "";

  // Local workers share the cores: give each its share unless told otherwise.
  std::vector<std::string> common = o.train_args;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!hasFlag(common, "--threads")) {
    common.push_back("--threads");
    common.push_back(std::to_string(std::max(1, cores / o.workers)));
  }
  if (o.ps > 0 && !hasFlag(common, "--ps-threads")) {
    common.push_back("--ps-threads");
    common.push_back(std::to_string(std::max(1, cores / o.ps)));
  }
  if (o.ps > 0) {
    common.push_back("--ps_hosts");
    common.push_back(ps_hosts);
  }

  std::signal(SIGINT, onLaunchSignal);
  std::signal(SIGTERM, onLaunchSignal);
  cluster::ProcessGroup group;
  const std::string self = cluster::selfExecutable();
  auto startTask = [&](const std::string& job, int index) {
    cluster::ChildSpec child;
    child.name = fmt::format("{} {}", job, index);
    child.argv = {self, "train"};
    child.argv.insert(child.argv.end(), common.begin(), common.end());
    for (std::string extra : {std::string("--worker_hosts"), worker_hosts, std::string("--job_name"), job,
                              std::string("--task_index"), std::to_string(index)}) {
      child.argv.push_back(extra);
    }
    group.start(child);
  };
  for (int i = 0; i < o.ps; ++i) startTask("ps", i);
  for (int i = 0; i < o.workers; ++i) startTask("worker", i);
  std::fprintf(stderr, "launch: %d worker(s) at %s\n", o.workers, worker_hosts.c_str());
  if (o.ps > 0) std::fprintf(stderr, "launch: %d parameter server(s) at %s\n", o.ps, ps_hosts.c_str());

  // After a forwarded stop, 130 is how a task says it saved its state.
  bool forwarded = false;
  auto result = group.wait(
      std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000)),
      [&forwarded] {
        int signal = g_forward_signal.exchange(0);
        if (signal > 0) forwarded = true;
        return signal;
      },
      [&forwarded](const cluster::ChildExit& e) {
        return e.signaled || (e.exit_code != 0 && !(forwarded && e.exit_code == 130));
      });
  if (!result.ok) {
    std::fprintf(stderr, "launch: %s; the other tasks were stopped\n", result.first_failure.c_str());
    return 1;
  }
  for (const auto& e : result.exits) {
    if (e.exit_code == 130) {
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
  cmd->add_option("--workers", options->workers, "worker processes")->capture_default_str();
  cmd->add_option("--ps", options->ps, "parameter-server processes")->capture_default_str();
  cmd->add_option("--host", options->host, "address the tasks listen on")->capture_default_str();
  cmd->add_option("--grace", options->grace_s, "seconds between SIGTERM and SIGKILL when stopping the others")
      ->capture_default_str();
  cmd->add_option("train_args", options->train_args, "arguments for `tandem train`, after --");
  cmd->footer("Examples:\n  tandem launch --workers 2 -- --model cnn --epochs 1 --out runs/two\n"
              "  tandem launch --ps 1 --workers 4 -- --ps-mode async --out runs/ps");
  return {cmd, [options] { return runLaunch(*options); }};
}

}  // namespace tandem::cli
