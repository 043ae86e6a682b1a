#pragma once
// Where this process sits, worked out once by each entry point (`tandem
// train`, tandem::init, tandem::fit) from its flags and environment: its
// cluster, its rank among the job's workers on this host (which GPU it
// takes), and its share of the host's cores. Torch-free; applying the
// thread count is the trainer's.
#include <optional>
#include <string_view>

#include "cluster/cluster_spec.hpp"
#include "cluster/device_placement.hpp"
#include "cluster/local_share.hpp"

namespace tandem::cluster {

struct ProcessSetup {
  std::optional<ClusterSpec> spec;  // none: standalone
  LocalRank local;                  // among the job's workers on this host
  ThreadPlan threads;               // this process's share of the cores
};

// `threads`: the --threads asked for, 0 for a share of the free cores.
// Throws InputError naming the flag, variable or host at fault.
ProcessSetup setUpProcess(const ClusterFlags& flags, int threads, const Environment& env);

// For the APIs, which train only as workers: InputError naming `entry`
// ("tandem::init") when this process is a parameter-server task.
void requireWorkerTask(const ProcessSetup& setup, std::string_view entry);

}  // namespace tandem::cluster
