#pragma once
// What `tandem launch` is asked to run, decided before any task starts:
// its options, checked once here rather than by every task, and the job's
// shape (a program or `tandem train`, its hosts, whether its membership
// may change, which failures it survives, who serves its store).
#include <optional>
#include <string>
#include <vector>

#include "cli/train_flags.hpp"
#include "core/environment.hpp"
#include "launch/failure_policy.hpp"
#include "launch/host_list.hpp"
#include "launch/remote_task.hpp"

namespace tandem::cli {

struct LaunchOptions {
  int workers = 2;
  int ps = 0;
  std::string host = "127.0.0.1";
  bool host_given = false;
  bool workers_given = false;
  // A job over several hosts: "h1:4,h2:4", or a hostfile's lines.
  std::string hosts;
  std::string hostfile;
  launch::SshOptions ssh;
  double grace_s = 10;
  int max_restarts = 0;  // gang restarts after a failure, each from OUT's newest checkpoint
  std::string on_worker_failure = "auto";  // stop | continue | auto (continue for async PS)
  std::string ps_out = "runs/default";  // program mode: where the servers write their summaries
  int min_workers = 0;  // program mode: an elastic job (hvd.elastic) that goes on with this many
  int max_workers = 0;  // program mode: and grows to this many (Horovod's --max-np)
  // A live job that grows (train's --max-workers): prints "host:slots" lines.
  std::string host_discovery_script;
  std::vector<std::string> train_args;
};

struct LaunchPlan {
  bool program = false;      // `launch -- ./trainer ...`, not `tandem train`
  std::string program_path;  // as found in PATH
  std::optional<ParsedTrainArgs> train;  // the tasks' run config, parsed as they will parse it
  std::optional<launch::TaskHosts> placement;  // --hosts or --hostfile
  bool live = false;        // all-reduce whose members may change
  bool replicated = false;  // --ps-replicas 2: a server's death leaves its chunks at their other replica
  int min_workers = 0;      // the live job's bounds, for the discovery script
  int max_workers = 0;
  bool discovers = false;   // --host-discovery-script
  launch::JobKind policy;   // what failures the job survives
  bool serves_store = false;  // launch serves the job's store: worker 0 may die, or no address is known ahead
  std::string store_host;     // where it does
};

// Checks `o` and decides the job's shape; fills in what the options leave
// to launch (--workers from the hosts' slots). Throws InputError naming the
// flag for bad input.
LaunchPlan planLaunch(LaunchOptions& o, const Environment& env);

}  // namespace tandem::cli
