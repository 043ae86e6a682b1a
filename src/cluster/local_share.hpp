#pragma once
// How many processes of this job share this host, and so how many threads
// each should run. Four workers that each take every core run far slower
// than one, so the default is an equal share of the cores. Torch-free; the
// environment is passed in, as for ClusterSpec.
#include <chrono>
#include <optional>
#include <string>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

struct LocalProcesses {
  int count = 1;
  std::string source;  // "flags", "TF_CONFIG", an environment variable, or "standalone"
  // Every task of the job on this host, this one included: a worker's
  // count leaves out the servers beside it, but they start with it.
  int job_tasks = 1;
};

// This host's processes of the job, from the first source present: a spec
// that lists hosts (flags, TF_CONFIG, `tandem launch`: for a worker the
// workers on its host, for a PS task every task on its host), then LOCAL_WORLD_SIZE
// (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), MPI_LOCALNRANKS
// (MPICH), SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE (with SLURM_NODEID).
// Throws InputError naming a malformed variable.
LocalProcesses countLocalProcesses(const std::optional<ClusterSpec>& spec, const Environment& env);

struct ThreadPlan {
  int threads = 1;
  // "--threads", "OMP_NUM_THREADS", "cores / local processes" or
  // "free cores / local processes"
  std::string source;
  int local_processes = 1;
  int cores = 1;
  int busy_cores = 0;  // cores other processes held when the plan was made
  // The job's threads on this host, assuming every local process runs as many.
  bool oversubscribed() const { return threads * local_processes > cores; }
  // One line naming the numbers; empty when the host is not oversubscribed.
  std::string warning() const;
};

// `requested` > 0 (--threads) wins, then a positive OMP_NUM_THREADS, then
// max(1, free cores / local processes), where `busy_cores` (rounded) of the
// cores are taken by other processes: an OpenMP team with a member that
// shares its core with another process waits at every barrier for that
// member's time slice (the cnn on 2 cores with one busy: 2 threads 7,500
// samples/s, 1 thread 12,000; bench/busy_core.sh). Throws InputError for a
// malformed OMP_NUM_THREADS.
ThreadPlan planThreads(int requested, const Environment& env, const LocalProcesses& local, int cores,
                       double busy_cores = 0);

// The fraction of this host's CPU time, in cores, that was not idle over
// `window` (/proc/stat); nullopt where that cannot be read.
std::optional<double> measureBusyCores(std::chrono::milliseconds window);

// planThreads for this process: this host's cores, and, when the plan is
// an equal share for the job's only task on this host, the cores busy over
// 100 ms. (With any other task of the job here, a worker's own server
// included, its start-up would read as busy, so the share stays cores /
// local processes.) Logs an oversubscribed host, and cores found busy.
ThreadPlan planHostThreads(int requested, const Environment& env, const LocalProcesses& local);

}  // namespace tandem::cluster
