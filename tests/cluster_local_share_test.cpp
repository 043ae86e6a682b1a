#include "cluster/local_share.hpp"

#include <gtest/gtest.h>

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
