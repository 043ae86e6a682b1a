// The membership quorum as a pure object: every ordering of deaths,
// arrivals, joins and departures replayed with injected time.
#include <gtest/gtest.h>

#include "cluster/quorum.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

using namespace std::chrono_literals;

const QuorumTime t0{};

QuorumOptions options(int min_workers = 1, int max_workers = 0) {
  QuorumOptions o;
  o.min_workers = min_workers;
  o.max_workers = max_workers;
  o.heartbeat_timeout = 5s;
  o.arrival_timeout = 30s;
  return o;
}

// Heartbeats from `workers` at `now`.
void beat(Quorum& q, std::initializer_list<int> workers, QuorumTime now) {
  for (int w : workers) q.heartbeat(w, now);
}

TEST(Quorum, NothingHappensWhileEveryoneBeats) {
  Quorum q(4, 0, options(), t0);
  for (int s = 1; s <= 20; ++s) {
    beat(q, {0, 1, 2, 3}, t0 + s * 1s);
    const QuorumView v = q.poll(t0 + s * 1s);
    ASSERT_FALSE(v.round_open) << "at " << s << "s";
    EXPECT_EQ(v.current.generation, 0);
  }
  EXPECT_EQ(q.current().workers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(q.current().rankOf(2), 2);
  EXPECT_EQ(q.current().rankOf(4), std::nullopt);
}

TEST(Quorum, ASilentWorkerIsDroppedOnceTheSurvivorsArrive) {
  Quorum q(4, 100, options(), t0);
  beat(q, {0, 1, 3}, t0 + 4s);  // worker 2 last beat at t0
  EXPECT_FALSE(q.poll(t0 + 4s).round_open) << "4s of silence is within the 5s timeout";
  beat(q, {0, 1, 3}, t0 + 5500ms);
  QuorumView v = q.poll(t0 + 5500ms);
  ASSERT_TRUE(v.round_open) << "5.5s of silence is a death: the others are told to come to the step boundary";
  EXPECT_EQ(v.awaited, (std::vector<int>{0, 1, 3}));
  q.arrive(0, 0, 100, t0 + 5600ms);
  q.arrive(3, 0, 100, t0 + 5600ms);
  v = q.poll(t0 + 5600ms);
  EXPECT_EQ(v.current.generation, 0) << "worker 1 is alive and has not arrived: the round waits";
  EXPECT_EQ(v.awaited, (std::vector<int>{1}));
  q.arrive(1, 0, 100, t0 + 5700ms);
  v = q.poll(t0 + 5700ms);
  ASSERT_FALSE(v.stopped);
  EXPECT_FALSE(v.round_open);
  EXPECT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(v.current.rankOf(3), 2) << "ranks close up in worker-id order";
  EXPECT_EQ(v.current.step, 100);
  EXPECT_EQ(v.current.source, -1) << "nobody is behind: nobody copies state";
  EXPECT_TRUE(v.current.healing.empty());
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0].worker, 2);
  EXPECT_EQ(v.current.departed[0].why, "silent for 5.5s");
}

TEST(Quorum, ADeathDuringABucketsAllReduceLeavesSomeAheadAndTheRestCopyFromThem) {
  // Worker 3 died after worker 1 had its last bucket summed: worker 1
  // finished step 101, workers 0 and 2 are still at 100 and redo nothing.
  Quorum q(4, 100, options(), t0);
  q.arrive(0, 0, 100, t0 + 1s);
  q.arrive(2, 0, 100, t0 + 1s);
  q.arrive(1, 0, 101, t0 + 2s);
  QuorumView v = q.poll(t0 + 2s);
  EXPECT_EQ(v.current.generation, 0) << "worker 3 has not gone silent yet: it may still arrive";
  beat(q, {0, 1, 2}, t0 + 6s);
  v = q.poll(t0 + 6100ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.step, 101) << "the step that completed somewhere is kept: no update is lost";
  EXPECT_EQ(v.current.source, 1);
  EXPECT_EQ(v.current.healing, (std::vector<int>{0, 2}));
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0].worker, 3);
}

TEST(Quorum, ACleanLeaveIsNotWaitedFor) {
  Quorum q(3, 7, options(), t0);
  q.leave(1, t0 + 1s);
  QuorumView v = q.poll(t0 + 1s);
  ASSERT_TRUE(v.round_open);
  EXPECT_EQ(v.awaited, (std::vector<int>{0, 2}));
  q.arrive(0, 0, 7, t0 + 1100ms);
  q.arrive(2, 0, 7, t0 + 1100ms);
  v = q.poll(t0 + 1100ms);
  ASSERT_EQ(v.current.generation, 1) << "formed at once, not after the heartbeat timeout";
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 2}));
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0].why, "left");
  beat(q, {1}, t0 + 1200ms);
  EXPECT_FALSE(q.poll(t0 + 1200ms).round_open) << "a departed worker's heartbeat does not bring it back";
}

TEST(Quorum, AJoinerOpensARoundAndCopiesFromTheLowestWorkerAtTheNewestStep) {
  Quorum q(2, 0, options(1, 3), t0);
  q.arrive(2, 0, -1, t0 + 1s);
  QuorumView v = q.poll(t0 + 1s);
  ASSERT_TRUE(v.round_open) << "the members learn of the joiner at their next poll";
  EXPECT_EQ(v.awaited, (std::vector<int>{0, 1}));
  q.arrive(1, 0, 40, t0 + 1200ms);
  q.arrive(0, 0, 40, t0 + 1300ms);
  v = q.poll(t0 + 1300ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.joined, (std::vector<int>{2}));
  EXPECT_EQ(v.current.step, 40);
  EXPECT_EQ(v.current.source, 0);
  EXPECT_EQ(v.current.healing, (std::vector<int>{2}));
  EXPECT_TRUE(v.current.departed.empty());
}

TEST(Quorum, AJoinerBeyondMaxWorkersWaitsForRoom) {
  Quorum q(2, 0, options(1, 2), t0);
  q.arrive(5, 0, -1, t0 + 1s);
  beat(q, {0, 1}, t0 + 1s);
  EXPECT_FALSE(q.poll(t0 + 1s).round_open) << "the job is at --max-workers: no round for a joiner";
  q.leave(0, t0 + 2s);
  QuorumView v = q.poll(t0 + 2s);
  ASSERT_TRUE(v.round_open);
  beat(q, {5}, t0 + 2s);
  q.arrive(1, 0, 12, t0 + 2100ms);
  v = q.poll(t0 + 2100ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{1, 5})) << "the waiting joiner takes the room worker 0 left";
  EXPECT_EQ(v.current.healing, (std::vector<int>{5}));
  EXPECT_EQ(v.current.source, 1);
}

// The launcher restarts a killed worker faster than the survivors take it
// for dead: the new process, arriving with no state, is the member the
// round awaited, and copies the job's step like any joiner.
TEST(Quorum, ARestartedWorkerArrivingBeforeItsPredecessorIsDroppedIsTakenBackBehind) {
  Quorum q(3, 0, options(2), t0);
  q.arrive(0, 0, 30, t0 + 1s);  // their all-reduce with worker 2 failed
  q.arrive(1, 0, 30, t0 + 1s);
  QuorumView v = q.poll(t0 + 1s);
  ASSERT_TRUE(v.round_open);
  EXPECT_EQ(v.awaited, (std::vector<int>{2}));
  q.arrive(2, 0, -1, t0 + 1500ms);
  v = q.poll(t0 + 1500ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.step, 30);
  EXPECT_EQ(v.current.source, 0);
  EXPECT_EQ(v.current.healing, (std::vector<int>{2}));
  EXPECT_EQ(v.current.joined, (std::vector<int>{2})) << "a new process in worker 2's place";
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0], (Departure{2, "its process restarted"}));
  EXPECT_FALSE(v.round_open);
}

TEST(Quorum, TwoDeathsAtOnceAreBothNamed) {
  Quorum q(4, 3, options(), t0);
  beat(q, {0, 3}, t0 + 5s);
  q.poll(t0 + 6s);
  q.arrive(0, 0, 3, t0 + 6s);
  q.arrive(3, 0, 3, t0 + 6s);
  const QuorumView v = q.poll(t0 + 6s);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 3}));
  ASSERT_EQ(v.current.departed.size(), 2u);
  EXPECT_EQ(v.current.departed[0].worker, 1);
  EXPECT_EQ(v.current.departed[1].worker, 2);
  EXPECT_EQ(v.current.departed[1].why, "silent for 6.0s");
}

TEST(Quorum, ADeathDuringARecoveryIsLeftOutOfTheRoundItArrivedFor) {
  Quorum q(3, 9, options(), t0);
  q.leave(2, t0 + 1s);
  q.poll(t0 + 1s);
  q.arrive(1, 0, 9, t0 + 1s);  // then worker 1 dies while the round waits for worker 0
  beat(q, {0}, t0 + 6s);
  QuorumView v = q.poll(t0 + 6500ms);
  ASSERT_EQ(v.current.generation, 0) << "worker 0 is alive and awaited";
  EXPECT_EQ(v.awaited, (std::vector<int>{0}));
  q.arrive(0, 0, 9, t0 + 6500ms);
  v = q.poll(t0 + 6500ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0}));
  ASSERT_EQ(v.current.departed.size(), 2u);
  EXPECT_EQ(v.current.departed[0].why, "silent for 5.5s");
  EXPECT_EQ(v.current.departed[1].why, "left");
}

TEST(Quorum, ADeathDuringAJoinFormsWithoutTheJoiner) {
  Quorum q(2, 5, options(1, 3), t0);
  q.arrive(2, 0, -1, t0 + 1s);
  q.poll(t0 + 1s);
  beat(q, {0, 1}, t0 + 6s);
  q.arrive(0, 0, 5, t0 + 6100ms);
  q.arrive(1, 0, 5, t0 + 6100ms);
  const QuorumView v = q.poll(t0 + 6100ms);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1}));
  EXPECT_TRUE(v.current.joined.empty());
  EXPECT_TRUE(v.current.healing.empty());
  EXPECT_FALSE(v.round_open) << "the dead joiner does not keep a round open";
}

TEST(Quorum, AWorkerStuckInACollectiveIsDroppedAfterTheArrivalTimeoutAndMayRejoin) {
  Quorum q(3, 50, options(), t0);
  q.arrive(0, 0, 50, t0 + 1s);
  q.arrive(1, 0, 50, t0 + 1s);
  for (int s = 2; s <= 30; ++s) {
    beat(q, {0, 1, 2}, t0 + s * 1s);
    ASSERT_EQ(q.poll(t0 + s * 1s).current.generation, 0) << "worker 2 beats: it is waited for, at " << s << "s";
  }
  beat(q, {0, 1, 2}, t0 + 31s);
  QuorumView v = q.poll(t0 + 31s);
  ASSERT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1}));
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0].why, "did not reach the step boundary within 30.0s");
  beat(q, {2}, t0 + 32s);
  EXPECT_FALSE(q.poll(t0 + 32s).round_open) << "its heartbeat alone does not bring it back";
  q.arrive(2, 0, 50, t0 + 33s);
  v = q.poll(t0 + 33s);
  ASSERT_TRUE(v.round_open) << "it comes back by arriving, as a joiner";
  q.arrive(0, 1, 51, t0 + 33s);
  q.arrive(1, 1, 51, t0 + 33s);
  v = q.poll(t0 + 33s);
  ASSERT_EQ(v.current.generation, 2);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.healing, (std::vector<int>{2})) << "its step-50 state is stale: it copies step 51";
}

TEST(Quorum, FallingBelowMinWorkersStopsTheJobNamingTheDead) {
  Quorum q(4, 0, options(3), t0);
  beat(q, {0, 1}, t0 + 5s);
  q.arrive(0, 0, 8, t0 + 6s);
  q.arrive(1, 0, 8, t0 + 6s);
  const QuorumView v = q.poll(t0 + 6s);
  ASSERT_TRUE(v.stopped);
  EXPECT_EQ(*v.stopped, "2 workers left, fewer than --min-workers 3; lost: worker 2 (silent for 6.0s), "
                        "worker 3 (silent for 6.0s)");
  EXPECT_FALSE(v.round_open);
  EXPECT_TRUE(q.poll(t0 + 7s).stopped) << "a stopped quorum stays stopped";
}

TEST(Quorum, OnlyFreshJoinersLeftIsAStopNotAJobFromNothing) {
  Quorum q(1, 3, options(1, 2), t0);
  q.arrive(4, 0, -1, t0 + 1s);
  q.poll(t0 + 1s);
  const QuorumView v = q.poll(t0 + 6s);  // worker 0 went silent at t0
  ASSERT_TRUE(v.stopped);
  EXPECT_EQ(*v.stopped, "no worker with the model's state is left; lost: worker 0 (silent for 6.0s)");
}

TEST(Quorum, ALateArrivalForAFormedRoundOpensNothing) {
  Quorum q(2, 0, options(), t0);
  q.leave(1, t0);
  q.arrive(0, 0, 3, t0 + 1s);
  ASSERT_EQ(q.poll(t0 + 1s).current.generation, 1);
  q.arrive(0, 0, 3, t0 + 1100ms);  // a retried request from generation 0
  QuorumView v = q.poll(t0 + 1100ms);
  EXPECT_FALSE(v.round_open);
  EXPECT_EQ(v.current.generation, 1);
  q.arrive(0, 1, 4, t0 + 1200ms);  // a real request after generation 1
  v = q.poll(t0 + 1200ms);
  EXPECT_EQ(v.current.generation, 2);
  EXPECT_EQ(v.current.step, 4);
}

TEST(Quorum, OptionsThatCannotHoldAreRefusedWithTheirValues) {
  try {
    Quorum(4, 0, options(5), t0);
    FAIL() << "min above the size";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--min-workers 5: expected 1 to the job's 4 workers");
  }
  try {
    Quorum(4, 0, options(1, 3), t0);
    FAIL() << "max below the size";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--max-workers 3 is below the job's 4 workers");
  }
  EXPECT_THROW(Quorum(0, 0, options(), t0), InputError);
}

}  // namespace
}  // namespace tandem::cluster

namespace tandem::cluster {
namespace {

// A collective failed, so the survivors arrive: a member that stopped
// beating is taken for dead after a few missed beats, not the whole
// timeout; one that beats on is waited for.
TEST(Quorum, WhileARoundIsOpenASilentMemberIsSuspectedSooner) {
  QuorumOptions o = options();
  o.suspect_after = 1s;
  Quorum q(3, 10, o, t0);
  beat(q, {0, 1, 2}, t0 + 1s);
  beat(q, {0, 1}, t0 + 1800ms);  // worker 2 was killed after its beat at 1s
  q.arrive(0, 0, 10, t0 + 1900ms);
  QuorumView v = q.poll(t0 + 1900ms);
  EXPECT_EQ(v.current.generation, 0) << "0.9s of silence: within the suspicion window";
  EXPECT_EQ(v.awaited, (std::vector<int>{1, 2}));
  q.arrive(1, 0, 10, t0 + 2200ms);
  v = q.poll(t0 + 2200ms);
  ASSERT_EQ(v.current.generation, 1) << "1.2s of silence while the others met: dead, 3.8s before the timeout";
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1}));
  EXPECT_EQ(v.current.departed[0].why, "silent for 1.2s");
  // Outside a round the full timeout holds.
  beat(q, {0}, t0 + 5s);
  EXPECT_FALSE(q.poll(t0 + 5s).round_open) << "worker 1 silent 2.8s with no round open: alive";
}

}  // namespace
}  // namespace tandem::cluster
