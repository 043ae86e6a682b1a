#include "ps/step_clocks.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace tandem::ps {
namespace {

StepReport report(double loss = 1.0) { return {loss, 0.01, false}; }

std::span<const std::byte> asBytes(const std::vector<char>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

// Reports `worker`'s next step and returns ps 0's answer to it.
StepAgreement step(StepClocks& clocks, int worker) {
  clocks.report(worker, clocks.clockOf(worker) + 1, report(), "w" + std::to_string(worker), 1);
  auto answers = clocks.release();
  EXPECT_EQ(answers.size(), 1u);
  return answers.empty() ? StepAgreement{} : answers.front().agreement;
}

TEST(StepClocksAsync, TheJobsStepsAreSharedAndNeverOvershot) {
  StepClocks clocks(Mode::PsAsync, 0, 2, 0, 5);
  // Both workers start one step unasked (2 granted); three more remain.
  EXPECT_FALSE(step(clocks, 0).finished);  // global 1, grants the 3rd
  EXPECT_FALSE(step(clocks, 0).finished);  // global 2, grants the 4th
  EXPECT_FALSE(step(clocks, 0).finished);  // global 3, grants the 5th
  auto last_fast = step(clocks, 0);        // global 4: nothing left to grant
  EXPECT_TRUE(last_fast.finished);
  EXPECT_EQ(last_fast.global_step, 4u);
  auto slow = step(clocks, 1);             // the slow worker's first and only step
  EXPECT_TRUE(slow.finished);
  EXPECT_EQ(slow.global_step, 5u);
  EXPECT_EQ(clocks.globalStep(), 5u);
}

TEST(StepClocksAsync, ALostWorkersGrantGoesToTheOthers) {
  StepClocks clocks(Mode::PsAsync, 0, 2, 10, 13);  // resumed at 10, three steps to make
  EXPECT_FALSE(step(clocks, 0).finished);  // 11; grants the 13th
  EXPECT_TRUE(step(clocks, 0).finished);   // 12; worker 1 still holds the 13th
  clocks.lose(1);                          // ...and dies: the 13th is free again
  StepClocks fresh(Mode::PsAsync, 0, 2, 10, 13);
  step(fresh, 0);
  fresh.lose(1);
  EXPECT_FALSE(step(fresh, 0).finished);  // 12; takes the dead worker's step
  EXPECT_TRUE(step(fresh, 0).finished);   // 13
  EXPECT_EQ(fresh.globalStep(), 13u);
}

// An elastic job's replacement continues its predecessor's clock; the step
// the dead one held goes back, and the replacement starts one of its own.
TEST(StepClocksAsync, AReplacementContinuesTheLostWorkersClock) {
  StepClocks clocks(Mode::PsAsync, 0, 2, 10, 16);  // 2 granted at the start, 4 left
  step(clocks, 0);                                // 11, grants a 3rd
  step(clocks, 1);                                // 12, grants a 4th
  step(clocks, 1);                                // 13, grants a 5th; worker 1 holds it and dies
  EXPECT_TRUE(clocks.rejoin(1));                  // its 5th back, the replacement's own taken
  EXPECT_EQ(clocks.clockOf(1), 12u);
  EXPECT_THROW(clocks.report(1, 1, report(), "new", 1), InputError) << "a replacement starts from its predecessor's clock";
  EXPECT_FALSE(step(clocks, 1).finished);  // 14: worker 1's 3rd step, grants the 6th
  EXPECT_TRUE(step(clocks, 0).finished);   // 15: nothing left to grant
  EXPECT_TRUE(step(clocks, 1).finished);   // 16
  EXPECT_EQ(clocks.globalStep(), 16u);
  EXPECT_EQ(clocks.stepsByWorker(), (std::vector<uint32_t>{2, 4}));
}

// A worker that dies holding a step gives it back to the job; once another
// worker took it and every step is granted, its replacement makes none
// (chaos: a replacement that came at the very end made step 34001 of 34000).
TEST(StepClocksAsync, AReplacementAfterTheLastGrantMakesNoStep) {
  StepClocks clocks(Mode::PsAsync, 0, 2, 0, 4);  // 2 granted at the start
  step(clocks, 0);                               // 1, grants the 3rd
  step(clocks, 0);                               // 2, grants the 4th
  clocks.lose(1);                                // worker 1 dies holding its step: 3 granted
  EXPECT_FALSE(step(clocks, 0).finished);        // 3, takes worker 1's step back
  EXPECT_FALSE(clocks.rejoin(1)) << "granted a step the job does not have";
  EXPECT_TRUE(step(clocks, 0).finished);         // 4
  EXPECT_EQ(clocks.globalStep(), 4u);
}

// SSP's bound holds against the live workers only: a lost worker no longer
// holds the others back, and its replacement does again.
TEST(StepClocksBounded, TheBoundHoldsAgainstLiveWorkersOnly) {
  StepClocks clocks(Mode::Ssp, 1, 2, 0);
  step(clocks, 0);  // 1, within 1 of worker 1's 0
  clocks.report(0, 2, report(), "w0", 2);
  EXPECT_TRUE(clocks.release().empty()) << "step 2 is 2 ahead of worker 1";
  clocks.lose(1);
  auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].request_id, 2u);
  clocks.rejoin(1);  // at its clock 0
  clocks.report(0, 3, report(), "w0", 3);
  EXPECT_TRUE(clocks.release().empty()) << "the replacement holds worker 0 back again";
  clocks.report(1, 1, report(), "w1", 4);
  answers = clocks.release();
  ASSERT_EQ(answers.size(), 1u) << "worker 0's step 3 is still 2 ahead";
  EXPECT_EQ(answers[0].request_id, 4u);
  clocks.report(1, 2, report(), "w1", 5);
  EXPECT_EQ(clocks.release().size(), 2u);
}

// Sync mode still waits for a lost worker: its steps fail by timeout.
TEST(StepClocksSync, ALostWorkerStillHoldsTheStep) {
  StepClocks clocks(Mode::PsSync, 0, 2, 0);
  clocks.report(0, 1, report(), "w0", 1);
  clocks.lose(1);
  EXPECT_TRUE(clocks.release().empty());
}

// A sync replacement joins at a step boundary: while the others are still
// in a step, it joins in that step's report (its own stands for the step it
// did not push, and is in no loss); once they all finished it, in the next.
TEST(StepClocksSync, AReplacementJoinsAtTheNextStepBoundaryAndItsJoinReportIsInNoLoss) {
  StepClocks clocks(Mode::PsSync, 0, 3, 0);
  clocks.report(0, 1, report(2.0), "w0", 1);
  clocks.report(2, 1, report(), "old w2", 2);  // worker 2 reports, then dies
  EXPECT_TRUE(clocks.release().empty()) << "worker 1 is still in step 1";
  EXPECT_EQ(clocks.joinSync(2), 0u) << "joins in step 1's report, which the others wait for";
  clocks.report(1, 1, report(4.0), "w1", 3);
  EXPECT_TRUE(clocks.release().empty()) << "step 1 released without the replacement's report";
  clocks.report(2, 1, report(100.0), "new w2", 4);
  const auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 3u) << "the dead worker's held report is answered to nobody";
  for (const auto& a : answers) {
    EXPECT_NE(a.routing, "old w2");
    EXPECT_DOUBLE_EQ(a.agreement.loss, (2.0 + 1.0 + 4.0) / 3) << "the dead one's loss counts, the join's does not";
  }
  // Every other worker finished step 1: the next one joins in step 2's report.
  EXPECT_EQ(clocks.joinSync(1), 1u);
  clocks.report(0, 2, report(), "w0", 5);
  clocks.report(2, 2, report(), "new w2", 6);
  EXPECT_TRUE(clocks.release().empty());
  clocks.report(1, 2, report(9.0), "newer w1", 7);
  EXPECT_EQ(clocks.release().size(), 3u);
  // A keeper told the clock (--ps-replicas 2) takes it as given; after the
  // job's last step a replacement starts where the others ended.
  EXPECT_EQ(clocks.joinSync(1, 7u), 7u);
  StepClocks ended(Mode::PsSync, 0, 2, 0);
  ended.report(0, 1, report(), "w0", 1);
  ended.finish(0);
  EXPECT_EQ(ended.joinSync(1), 1u);
}

// The chief's report names a replacement server: every worker's agreement
// of that step names it, so all take it back before their next push; the
// next step's agreements name none.
TEST(StepClocksSync, AServerTheChiefTakesBackIsInEveryAgreementOfThatStep) {
  StepClocks clocks(Mode::PsSync, 0, 3, 0);
  StepReport chief = report();
  chief.rejoining_server = 1;
  clocks.report(1, 1, report(), "w1", 1);
  clocks.report(0, 1, chief, "w0", 2);
  clocks.report(2, 1, report(), "w2", 3);
  const auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 3u);
  for (const auto& a : answers) EXPECT_EQ(a.agreement.rejoining_server, 1u);
  for (int w = 0; w < 3; ++w) clocks.report(w, 2, report(), "w" + std::to_string(w), 4);
  const auto next = clocks.release();
  ASSERT_EQ(next.size(), 3u);
  for (const auto& a : next) EXPECT_EQ(a.agreement.rejoining_server, kNoServer);
}

// A checkpoint's hold: every other worker is held at its next step
// boundary; the chief learns where each stands once all wait.
TEST(StepClocksHold, PausesEveryOtherWorkerAtAStepBoundary) {
  StepClocks clocks(Mode::PsAsync, 0, 3, 0, 100);
  step(clocks, 0);
  step(clocks, 1);
  clocks.hold(0, "chief", 9);
  EXPECT_TRUE(clocks.isWaiting(0)) << "a chief waiting for its hold's answer is not silent";
  EXPECT_THROW(clocks.hold(1, "w1", 1), InputError) << "one hold at a time";
  clocks.report(1, 2, report(), "w1", 10);
  EXPECT_TRUE(clocks.release().empty()) << "held: worker 1 waits";
  EXPECT_FALSE(clocks.takeHoldAnswer()) << "worker 2 is still in its step";
  clocks.lose(2);
  auto answer = clocks.takeHoldAnswer();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->request_id, 9u);
  EXPECT_EQ(answer->point.clocks, (std::vector<uint32_t>{1, 2, 0})) << "a lost worker's pushes are not awaited";
  EXPECT_EQ(answer->point.global_step, 3u);
  EXPECT_FALSE(clocks.takeHoldAnswer()) << "answered once";
  EXPECT_FALSE(clocks.isWaiting(0)) << "answered: it fetches the snapshot now";
  const auto stalled = clocks.stalled(std::chrono::duration<double>(0));
  ASSERT_EQ(stalled.size(), 1u);
  EXPECT_TRUE(stalled[0].late.empty()) << "nobody is late: the hold holds it";
  EXPECT_EQ(stalled[0].paused_by, std::optional<int>(0)) << "the stall names the chief's pause";
  clocks.unhold(0);
  const auto released = clocks.release();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].request_id, 10u);
  // The holder's next report ends a hold too; sync takes none.
  clocks.hold(0, "chief", 11);
  step(clocks, 0);
  StepClocks sync(Mode::PsSync, 0, 2, 0);
  EXPECT_THROW(sync.hold(0, "chief", 1), InputError);
}

TEST(StepClocksAwait, AnsweredOnceEveryOtherWorkerIsDoneOrLost) {
  StepClocks clocks(Mode::PsAsync, 0, 3, 0, 100);
  step(clocks, 0);
  step(clocks, 1);
  clocks.awaitOthers(0, "w0", 7);
  EXPECT_TRUE(clocks.release().empty());
  EXPECT_TRUE(clocks.isWaiting(0));
  clocks.finish(1);
  EXPECT_TRUE(clocks.release().empty());  // worker 2 is still running
  clocks.lose(2);
  auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].request_id, 7u);
  EXPECT_EQ(answers[0].agreement.global_step, 2u);
  EXPECT_FALSE(clocks.isWaiting(0));
}

TEST(StepClocksSync, ReportsTheStepItselfAsTheGlobalStep) {
  StepClocks clocks(Mode::PsSync, 0, 2, 4, 0);
  clocks.report(0, 5, report(1.0), "w0", 1);
  EXPECT_TRUE(clocks.release().empty());  // waits for worker 1
  clocks.report(1, 5, report(3.0), "w1", 2);
  auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 2u);
  for (const auto& a : answers) {
    EXPECT_EQ(a.agreement.global_step, 5u);
    EXPECT_DOUBLE_EQ(a.agreement.loss, 2.0);
    EXPECT_FALSE(a.agreement.finished);
  }
}

// DiLoCo's chief asks for a checkpoint in its report; every worker hears it
// in the step's agreement, through the wire's encoding too.
TEST(StepClocksSync, OneWorkersCheckpointWishReachesEveryWorker) {
  StepClocks clocks(Mode::PsSync, 0, 2, 0, 0);
  StepReport wish = report(1.0);
  wish.checkpoint = true;
  clocks.report(0, 1, wish, "w0", 1);
  clocks.report(1, 1, report(1.0), "w1", 2);
  auto answers = clocks.release();
  ASSERT_EQ(answers.size(), 2u);
  for (const auto& a : answers) {
    const StepAgreement decoded = decodeStepAgreement(asBytes(encode(a.agreement)), "test");
    EXPECT_TRUE(decoded.checkpoint);
    EXPECT_FALSE(decoded.stop);
  }
  EXPECT_TRUE(decodeStepReport(asBytes(encode(wish)), "test").checkpoint);
  EXPECT_FALSE(decodeStepReport(asBytes(encode(wish)), "test").stop);
  clocks.report(0, 2, report(1.0), "w0", 3);
  clocks.report(1, 2, report(1.0), "w1", 4);
  for (const auto& a : clocks.release()) EXPECT_FALSE(a.agreement.checkpoint) << "a wish holds for one step";
}

TEST(StepClocksStall, AHeldStepIsReportedOnceNamingTheLateWorkers) {
  StepClocks clocks(Mode::PsSync, 0, 3, 0, 0);
  clocks.report(0, 1, report(), "w0", 1);
  clocks.report(1, 1, report(), "w1", 2);
  EXPECT_TRUE(clocks.release().empty());  // worker 2 has not finished step 1
  EXPECT_TRUE(clocks.stalled(std::chrono::seconds(60)).empty());  // not long enough yet
  auto stalled = clocks.stalled(std::chrono::seconds(0));
  ASSERT_EQ(stalled.size(), 2u);
  EXPECT_EQ(stalled[0].late, std::vector<int>{2});
  EXPECT_TRUE(clocks.stalled(std::chrono::seconds(0)).empty());  // once only
  EXPECT_TRUE(clocks.isWaiting(0));  // a warning fails nothing
}

}  // namespace
}  // namespace tandem::ps
