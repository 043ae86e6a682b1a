// What launch does with each exit, replayed without a process: which task
// it starts again alone, which stops the job, and which it never restarts.
#include "launch/failure_policy.hpp"

#include <gtest/gtest.h>

namespace tandem::launch {
namespace {

using Replacement = FailurePolicy::Replacement;

ChildExit killed(const std::string& name) { return {.name = name, .pid = 7, .signaled = true, .signal = 9}; }
ChildExit exited(const std::string& name, int status) { return {.name = name, .pid = 7, .exit_code = status}; }

// Every PS mode but DiLoCo, as launch builds it for --max-restarts 2.
JobKind psJob(bool replicated = false) {
  return {.elastic_ps = true, .chief_comes_back = true, .replicated = replicated, .servers_come_back = replicated,
          .max_restarts = 2};
}

TEST(FailurePolicy, APsJobStartsAKilledWorkerAgainAloneWorkerZeroWhileARestartIsLeft) {
  const FailurePolicy policy(psJob());
  EXPECT_EQ(policy.replaces(killed("worker 2"), 0, false, false), Replacement::kWorker);
  EXPECT_EQ(policy.replaces(killed("worker 0"), 1, false, false), Replacement::kWorker);
  EXPECT_TRUE(policy.spares(killed("worker 0"), 1));
  // No restart left: worker 0's death stops the job, another's does not
  // replace it either.
  EXPECT_EQ(policy.replaces(killed("worker 0"), 2, false, false), Replacement::kNone);
  EXPECT_FALSE(policy.spares(killed("worker 0"), 2));
  EXPECT_TRUE(policy.stopsJob(killed("worker 0"), 2));
  EXPECT_EQ(policy.replaces(killed("worker 2"), 2, false, false), Replacement::kNone);
  // Without replicas a dead server takes the job down (a gang restart).
  EXPECT_EQ(policy.replaces(killed("ps 0"), 0, false, false), Replacement::kNone);
  EXPECT_TRUE(policy.stopsJob(killed("ps 0"), 0));
}

// Found by the sync chaos bench: a sync worker started again alone was
// taken for the job's end, so a server killed after it never came back.
TEST(FailurePolicy, ASyncWorkerStartedAgainAloneDoesNotEndTheJobSoALaterServerComesBack) {
  const FailurePolicy policy(psJob(/*replicated=*/true));
  EXPECT_TRUE(policy.stopsJob(killed("worker 5"), 0)) << "sync needs every worker at every step";
  EXPECT_FALSE(policy.endsJob(killed("worker 5"), 0, false, false)) << "it is started again alone";
  EXPECT_EQ(policy.replaces(killed("ps 1"), 1, /*ending=*/false, false), Replacement::kServer);
  // Without a restart left it ends the job.
  EXPECT_TRUE(policy.endsJob(killed("worker 5"), 2, false, false));
  EXPECT_FALSE(policy.endsJob(killed("ps 1"), 0, false, false)) << "its chunks go on at the other replica";
}

TEST(FailurePolicy, BadInputAStoppedJobAndACleanExitAreNeverRestarted) {
  const FailurePolicy policy(psJob(/*replicated=*/true));
  EXPECT_EQ(policy.replaces(exited("worker 1", 2), 0, false, false), Replacement::kNone);
  EXPECT_EQ(policy.replaces(exited("ps 1", 2), 0, false, false), Replacement::kNone);
  EXPECT_EQ(policy.replaces(exited("worker 1", 0), 0, false, false), Replacement::kNone);
  EXPECT_EQ(policy.replaces(exited("worker 1", 130), 0, false, false), Replacement::kNone) << "stopped on a signal";
  EXPECT_EQ(policy.replaces(killed("worker 1"), 0, false, /*forwarded=*/true), Replacement::kNone);
  EXPECT_EQ(policy.replaces(exited("worker 1", 1), 0, false, false), Replacement::kWorker);
}

TEST(FailurePolicy, AReplicatedServerComesBackUnlessTheJobIsEndingAndNeverStopsIt) {
  const FailurePolicy policy(psJob(/*replicated=*/true));
  EXPECT_EQ(policy.replaces(killed("ps 1"), 0, false, false), Replacement::kServer);
  EXPECT_EQ(policy.replaces(killed("ps 1"), 0, /*ending=*/true, false), Replacement::kNone);
  EXPECT_FALSE(policy.stopsJob(killed("ps 1"), 2));
  JobKind diloco = psJob(true);
  diloco.servers_come_back = false;
  diloco.chief_comes_back = false;
  EXPECT_EQ(FailurePolicy(diloco).replaces(killed("ps 1"), 0, false, false), Replacement::kNone);
  EXPECT_EQ(FailurePolicy(diloco).replaces(killed("worker 0"), 0, false, false), Replacement::kNone)
      << "DiLoCo's chief holds the outer optimizer";
  EXPECT_EQ(FailurePolicy(diloco).replaces(killed("worker 1"), 0, false, false), Replacement::kWorker);
}

TEST(FailurePolicy, AllReduceStopsUnlessLiveAndCarriesOnOnlyForASparedWorker) {
  const FailurePolicy gang({.max_restarts = 1});
  EXPECT_EQ(gang.replaces(killed("worker 2"), 0, false, false), Replacement::kNone);
  EXPECT_TRUE(gang.stopsJob(killed("worker 2"), 0));
  EXPECT_FALSE(gang.stopsJob(exited("worker 2", 0), 0));
  const FailurePolicy live({.live = true, .carry_on = true, .max_restarts = 1});
  EXPECT_EQ(live.replaces(killed("worker 0"), 0, false, false), Replacement::kWorker);
  EXPECT_FALSE(live.stopsJob(killed("worker 0"), 1)) << "a live job goes on without any worker";
  // Async without restarts goes on without a dead worker, never without worker 0.
  const FailurePolicy async({.elastic_ps = true, .chief_comes_back = true, .carry_on = true});
  EXPECT_FALSE(async.stopsJob(killed("worker 3"), 0));
  EXPECT_TRUE(async.stopsJob(killed("worker 0"), 0));
}

}  // namespace
}  // namespace tandem::launch
