#include "cluster/local_share.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "support/expect_input_error.hpp"

namespace tandem::cluster {
namespace {

using tandem::testing::expectInputError;

ClusterSpec flagSpec(const std::string& workers, const std::string& ps, const std::string& job, int index) {
  ClusterFlags flags;
  flags.worker_hosts = workers;
  flags.ps_hosts = ps;
  flags.job_name = job;
  flags.task_index = index;
  return resolveClusterSpec(flags, {}).value();
}

TEST(LocalProcessesTest, FlagClusterCountsWorkersForAWorkerAndEveryTaskForAServer) {
  auto spec = flagSpec("a:1,a:2,b:1", "a:9,b:9", "worker", 1);
  EXPECT_EQ(countLocalProcesses(spec, {}).count, 2);  // the two workers on a; the ps there waits on them
  EXPECT_EQ(countLocalProcesses(flagSpec("a:1,a:2,b:1", "a:9,b:9", "ps", 1), {}).count, 2);  // worker and ps on b
  EXPECT_EQ(countLocalProcesses(flagSpec("a:1,a:2,b:1", "a:9,b:9", "ps", 0), {}).count, 3);
  EXPECT_EQ(countLocalProcesses(spec, {}).source, "flags");
  // Listed hosts win over a launcher's variables.
  EXPECT_EQ(countLocalProcesses(spec, {{"LOCAL_WORLD_SIZE", "8"}}).count, 2);
  // Every task of the job on the host, whatever its role.
  EXPECT_EQ(countLocalProcesses(spec, {}).job_tasks, 3);
  const auto beside_server = flagSpec("127.0.0.1:7000", "127.0.0.1:7100", "worker", 0);
  EXPECT_EQ(countLocalProcesses(beside_server, {}).count, 1);
  EXPECT_EQ(countLocalProcesses(beside_server, {}).job_tasks, 2);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"LOCAL_WORLD_SIZE", "4"}}).job_tasks, 4);
}

// A worker beside its own server must not count the server's start-up as
// another process's load (1 PS + 1 worker ran 1 thread instead of 2 in two
// of three runs, docs/results/parameter-server.md): with another task of
// the job on the host, the busy cores are not measured. Here a spinner holds a core while
// the plan is made; a measurement would see it and leave that core alone.
TEST(ThreadPlanTest, AWorkerBesideItsServerDoesNotCountTheServersStartUpAsBusy) {
  std::atomic<bool> stop{false};
  std::thread spinner([&stop] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const auto beside_server = flagSpec("127.0.0.1:7000", "127.0.0.1:7100", "worker", 0);
  const ThreadPlan plan = planHostThreads(0, {}, countLocalProcesses(beside_server, {}));
  stop = true;
  spinner.join();
  EXPECT_EQ(plan.busy_cores, 0);
  EXPECT_EQ(plan.threads, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(LocalProcessesTest, LauncherVariables) {
  EXPECT_EQ(countLocalProcesses(std::nullopt, {}).count, 1);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"LOCAL_WORLD_SIZE", "4"}}).count, 4);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}).source,
            "OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"MPI_LOCALNRANKS", "5"}}).count, 5);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"SLURM_NTASKS_PER_NODE", "6"}}).count, 6);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "2"}}).count, 2);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "3"}}).count, 1);
  EXPECT_EQ(countLocalProcesses(std::nullopt, {{"SLURM_TASKS_PER_NODE", "7"}}).count, 7);
}

TEST(LocalProcessesTest, RejectsMalformedVariablesNamingThem) {
  expectInputError([] { countLocalProcesses(std::nullopt, {{"LOCAL_WORLD_SIZE", "two"}}); },
                   {"LOCAL_WORLD_SIZE", "'two'"});
  expectInputError([] { countLocalProcesses(std::nullopt, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}}); },
                   {"OMPI_COMM_WORLD_LOCAL_SIZE"});
  expectInputError(
      [] { countLocalProcesses(std::nullopt, {{"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NODEID", "2"}}); },
      {"SLURM_NODEID", "2(x2)"});
  expectInputError([] { countLocalProcesses(std::nullopt, {{"SLURM_TASKS_PER_NODE", "2(x"}}); },
                   {"SLURM_TASKS_PER_NODE"});
}

TEST(ThreadPlanTest, SharesTheCoresAmongLocalProcesses) {
  auto plan = planThreads(0, {}, {2, "LOCAL_WORLD_SIZE"}, 2);
  EXPECT_EQ(plan.threads, 1);
  EXPECT_FALSE(plan.oversubscribed());
  EXPECT_EQ(plan.warning(), "");
  EXPECT_EQ(planThreads(0, {}, {3, "flags"}, 16).threads, 5);
  EXPECT_EQ(planThreads(0, {}, {4, "flags"}, 2).threads, 1);  // never zero
  EXPECT_TRUE(planThreads(0, {}, {4, "flags"}, 2).oversubscribed());
}

TEST(ThreadPlanTest, CoresOtherProcessesHoldAreLeftToThem) {
  auto busy = planThreads(0, {}, {1, "standalone"}, 2, 0.97);
  EXPECT_EQ(busy.threads, 1);
  EXPECT_EQ(busy.busy_cores, 1);
  EXPECT_EQ(busy.source, "free cores / local processes");
  EXPECT_EQ(planThreads(0, {}, {1, "standalone"}, 2, 0.3).threads, 2);  // a flicker is no busy core
  EXPECT_EQ(planThreads(0, {}, {1, "standalone"}, 2, 0.3).source, "cores / local processes");
  EXPECT_EQ(planThreads(0, {}, {1, "standalone"}, 2, 2.0).threads, 1);  // never zero
  EXPECT_EQ(planThreads(0, {}, {2, "flags"}, 8, 2.2).threads, 3);       // (8 - 2) / 2
  // A choice made explicitly stands, busy or not.
  EXPECT_EQ(planThreads(2, {}, {1, "standalone"}, 2, 1.0).threads, 2);
  EXPECT_EQ(planThreads(0, {{"OMP_NUM_THREADS", "2"}}, {1, ""}, 2, 1.0).threads, 2);
}

TEST(ThreadPlanTest, BusyCoresAreMeasuredFromTheHostsCpuTime) {
  std::atomic<bool> stop{false};
  std::thread spinner([&stop] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const auto busy = measureBusyCores(std::chrono::milliseconds(200));
  stop = true;
  spinner.join();
  ASSERT_TRUE(busy.has_value()) << "/proc/stat could not be read";
  // The spinner alone keeps one core's worth busy, whatever else runs.
  EXPECT_GE(*busy, 0.5);
  EXPECT_LE(*busy, static_cast<double>(std::thread::hardware_concurrency()) + 1e-9);
}

TEST(ThreadPlanTest, ExplicitChoicesWinAndOversubscriptionIsNamed) {
  auto omp = planThreads(0, {{"OMP_NUM_THREADS", "3"}}, {2, "LOCAL_WORLD_SIZE"}, 2);
  EXPECT_EQ(omp.threads, 3);
  EXPECT_EQ(omp.source, "OMP_NUM_THREADS");
  EXPECT_EQ(planThreads(0, {{"OMP_NUM_THREADS", "4,2"}}, {1, ""}, 8).threads, 4);
  auto flag = planThreads(2, {{"OMP_NUM_THREADS", "3"}}, {2, "LOCAL_WORLD_SIZE"}, 2);
  EXPECT_EQ(flag.threads, 2);
  EXPECT_EQ(flag.source, "--threads");
  ASSERT_TRUE(flag.oversubscribed());
  const std::string warning = flag.warning();
  for (const char* needle : {"2 local process(es)", "2 thread(s)", "4 threads on 2 cores", "--threads 1"}) {
    EXPECT_NE(warning.find(needle), std::string::npos) << needle << " not in: " << warning;
  }
  expectInputError([] { planThreads(0, {{"OMP_NUM_THREADS", "many"}}, {1, ""}, 2); }, {"OMP_NUM_THREADS", "'many'"});
}

}  // namespace
}  // namespace tandem::cluster
