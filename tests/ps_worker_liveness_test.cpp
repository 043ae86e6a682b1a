// When a server gives up on a silent worker, replayed at chosen instants:
// no sockets, no sleeps.
#include "ps/worker_liveness.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point() + 1000s;

WorkerSighting stepper(Clock::time_point last_seen, bool waiting = false) {
  return {.last_seen = last_seen, .active = true, .steps_here = true, .waiting = waiting};
}
WorkerSighting quiet(Clock::time_point last_seen) {  // pushes nothing here (hierarchical)
  return {.last_seen = last_seen, .active = true, .steps_here = false, .waiting = false};
}
WorkerSighting finished() { return {.last_seen = t0, .active = false, .steps_here = true, .waiting = false}; }

TEST(WorkerLiveness, ASilentWorkerIsLostOnlyAfterTheTimeout) {
  WorkerLiveness liveness(5s);
  const std::vector<WorkerSighting> workers = {stepper(t0), stepper(t0 + 4s)};
  auto at5 = liveness.check(workers, t0 + 5s);
  EXPECT_TRUE(at5.lost.empty());
  EXPECT_FALSE(at5.everyone_gone);
  auto later = liveness.check(workers, t0 + 5s + 1ms);
  EXPECT_EQ(later.lost, std::vector<int>{0});
  EXPECT_FALSE(later.everyone_gone);  // worker 1 was heard at t0 + 4s
  EXPECT_EQ(liveness.check(workers, t0 + 9s + 1ms).lost, (std::vector<int>{0, 1}));
  EXPECT_TRUE(liveness.check(workers, t0 + 9s + 1ms).everyone_gone);
}

TEST(WorkerLiveness, AWorkerWaitingOnTheServerIsNotSilent) {
  WorkerLiveness liveness(5s);
  auto verdict = liveness.check({stepper(t0, /*waiting=*/true)}, t0 + 60s);
  EXPECT_TRUE(verdict.lost.empty());
  EXPECT_FALSE(verdict.everyone_gone);
}

TEST(WorkerLiveness, EveryoneDoneIsEveryoneGoneWithNobodyLost) {
  WorkerLiveness liveness(5s);
  auto verdict = liveness.check({finished(), finished()}, t0 + 60s);
  EXPECT_TRUE(verdict.lost.empty());
  EXPECT_TRUE(verdict.everyone_gone);
  // A goodbye ends a worker's watch, however long ago it was heard.
  EXPECT_TRUE(liveness.check({finished(), stepper(t0 + 58s)}, t0 + 60s).lost.empty());
}

TEST(WorkerLiveness, ASilentNonPusherWaitsForTheSteppersThenGetsOneTimeout) {
  WorkerLiveness liveness(5s);
  // Worker 1 said nothing since its hello at t0; worker 0 steps until t0 + 30s.
  for (auto now = t0; now <= t0 + 30s; now += 1s) {
    auto verdict = liveness.check({stepper(now), quiet(t0)}, now);
    ASSERT_TRUE(verdict.lost.empty()) << "at +" << (now - t0).count();
    ASSERT_FALSE(verdict.everyone_gone);
  }
  // Worker 0 says goodbye at t0 + 31s: worker 1's silence counts from then.
  auto done_at = t0 + 31s;
  EXPECT_TRUE(liveness.check({finished(), quiet(t0)}, done_at).lost.empty());
  EXPECT_TRUE(liveness.check({finished(), quiet(t0)}, done_at + 5s).lost.empty());
  auto verdict = liveness.check({finished(), quiet(t0)}, done_at + 5s + 1ms);
  EXPECT_EQ(verdict.lost, std::vector<int>{1});
  EXPECT_TRUE(verdict.everyone_gone);
}

TEST(WorkerLiveness, ANonPusherHeardAfterTheSteppersFinishedCountsFromThen) {
  WorkerLiveness liveness(5s);
  liveness.check({finished(), quiet(t0)}, t0 + 10s);  // the steppers are done at t0 + 10s
  // Its goodbye is late but it spoke at t0 + 12s: a timeout from then.
  EXPECT_TRUE(liveness.check({finished(), quiet(t0 + 12s)}, t0 + 16s).lost.empty());
  EXPECT_EQ(liveness.check({finished(), quiet(t0 + 12s)}, t0 + 17s + 1ms).lost, std::vector<int>{1});
}

TEST(WorkerLiveness, AKilledStepperIsLostWhileTheOthersCarryOn) {
  WorkerLiveness liveness(5s);
  // Worker 1 died at t0 (a kill says no goodbye); worker 0 keeps stepping.
  auto verdict = liveness.check({stepper(t0 + 6s), stepper(t0)}, t0 + 6s);
  EXPECT_EQ(verdict.lost, std::vector<int>{1});
  EXPECT_FALSE(verdict.everyone_gone);
}

// A goodbye against a kill: worker 0 says goodbye at t0 + 2s, worker 1 was
// killed at t0 and says nothing. The goodbye must not end the job while the
// killed worker is still owed its timeout, and the job ends with it lost.
TEST(WorkerLiveness, AGoodbyeBesideAKilledWorkerEndsTheJobOnlyOnceTheKilledOneIsLost) {
  WorkerLiveness liveness(5s);
  auto after_goodbye = liveness.check({finished(), stepper(t0)}, t0 + 2s);
  EXPECT_TRUE(after_goodbye.lost.empty());
  EXPECT_FALSE(after_goodbye.everyone_gone) << "the goodbye closed the server under a killed worker";
  auto at_timeout = liveness.check({finished(), stepper(t0)}, t0 + 5s + 1ms);
  EXPECT_EQ(at_timeout.lost, std::vector<int>{1});
  EXPECT_TRUE(at_timeout.everyone_gone);
}

}  // namespace
}  // namespace tandem::ps
