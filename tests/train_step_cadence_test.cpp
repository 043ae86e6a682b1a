// The cadences after a step, replayed in microseconds: what falls due, and
// what waits for agreeing replicas.
#include "train/step_cadence.hpp"

#include <gtest/gtest.h>

namespace tandem::train {
namespace {

CadenceRules chiefRules() {
  CadenceRules r;
  r.log_every = 10;
  r.steps_per_epoch = 25;
  r.checkpoint_every = 20;
  r.chief = true;
  return r;
}

StepOutcome stepTo(int64_t done, bool replicas_agree = true) {
  StepOutcome s;
  s.before = done - 1;
  s.done = done;
  s.replicas_agree = replicas_agree;
  return s;
}

TEST(StepCadence, CrossedFiresOncePerMultipleEvenWhenAStepJumps) {
  EXPECT_TRUE(crossed(9, 10, 10));
  EXPECT_FALSE(crossed(10, 11, 10));
  EXPECT_TRUE(crossed(7, 13, 10));   // shared steps may skip past a multiple
  EXPECT_FALSE(crossed(7, 13, 0));   // 0: off
}

TEST(StepCadence, LogsEvaluatesAndCheckpointsAtTheirSteps) {
  StepCadence cadence(chiefRules());
  int logs = 0, evals = 0, checkpoints = 0;
  for (int64_t done = 1; done <= 50; ++done) {
    const DueAfterStep due = cadence.after(stepTo(done));
    logs += due.log;
    evals += due.evaluate;
    checkpoints += due.checkpoint;
    EXPECT_EQ(due.log, done % 10 == 0) << done;
    EXPECT_EQ(due.evaluate, done % 25 == 0) << done;  // once an epoch
    EXPECT_EQ(due.checkpoint, done % 20 == 0) << done;
  }
  EXPECT_EQ(logs, 5);
  EXPECT_EQ(evals, 2);
  EXPECT_EQ(checkpoints, 2);
}

TEST(StepCadence, TheLastStepLogsButLeavesEvaluationAndCheckpointToTheEnd) {
  StepCadence cadence(chiefRules());
  StepOutcome last = stepTo(40);
  last.last = true;
  const DueAfterStep due = cadence.after(last);
  EXPECT_TRUE(due.log);
  EXPECT_FALSE(due.checkpoint);
  StepOutcome early_end = stepTo(3);
  early_end.last = true;
  EXPECT_TRUE(cadence.after(early_end).log);  // off the log cadence, still logged
}

TEST(StepCadence, OnlyTheChiefEvaluatesAndCheckpoints) {
  CadenceRules rules = chiefRules();
  rules.chief = false;
  StepCadence cadence(rules);
  for (int64_t done = 1; done <= 50; ++done) {
    const DueAfterStep due = cadence.after(stepTo(done));
    EXPECT_FALSE(due.evaluate || due.checkpoint) << done;
  }
  EXPECT_FALSE(cadence.checkpointRequested(19, false));
}

TEST(StepCadence, DisagreeingReplicasPostponeEvaluationAndCheckpointToTheNextAgreement) {
  StepCadence cadence(chiefRules());
  // DiLoCo: the replicas agree every 8th step.
  int64_t eval_at = -1, checkpoint_at = -1;
  for (int64_t done = 1; done <= 32; ++done) {
    const DueAfterStep due = cadence.after(stepTo(done, done % 8 == 0));
    if (due.evaluate) eval_at = done;
    if (due.checkpoint) checkpoint_at = done;
  }
  EXPECT_EQ(eval_at, 32);        // due at 25
  EXPECT_EQ(checkpoint_at, 24);  // due at 20
}

TEST(StepCadence, ACheckpointByAgreementWaitsForTheJobsAndIsAskedForAgain) {
  CadenceRules rules = chiefRules();
  rules.checkpoints_by_agreement = true;
  StepCadence cadence(rules);
  EXPECT_TRUE(cadence.checkpointRequested(19, false));   // step 20 is due: ask with it
  EXPECT_FALSE(cadence.checkpointRequested(19, true));   // shared steps: the job's step is known after it
  EXPECT_FALSE(cadence.after(stepTo(20)).checkpoint);    // agreeing replicas alone do not save
  EXPECT_TRUE(cadence.checkpointRequested(20, false));   // still wanted: asked again
  StepOutcome agreed = stepTo(21);
  agreed.checkpoint_agreed = true;
  EXPECT_TRUE(cadence.after(agreed).checkpoint);
  EXPECT_FALSE(cadence.checkpointRequested(21, false));
}

TEST(StepCadence, ATimedCheckpointCountsFromTheLastOneSaved) {
  CadenceRules rules = chiefRules();
  rules.checkpoint_every = 0;
  rules.checkpoint_secs = 10;
  StepCadence cadence(rules);
  StepOutcome s = stepTo(1);
  s.train_seconds = 9.5;
  EXPECT_FALSE(cadence.after(s).checkpoint);
  s = stepTo(2);
  s.train_seconds = 10.5;
  EXPECT_TRUE(cadence.after(s).checkpoint);
  cadence.saved(10.5);
  s = stepTo(3);
  s.train_seconds = 15;
  EXPECT_FALSE(cadence.after(s).checkpoint);
  s = stepTo(4);
  s.train_seconds = 20.6;
  EXPECT_TRUE(cadence.after(s).checkpoint);
}

TEST(StepCadence, ReplicaChecksFollowTheirOwnCadence) {
  CadenceRules rules = chiefRules();
  rules.chief = false;
  rules.verify_every = 7;
  StepCadence cadence(rules);
  for (int64_t done = 1; done <= 21; ++done) EXPECT_EQ(cadence.after(stepTo(done)).verify_replicas, done % 7 == 0);
}

}  // namespace
}  // namespace tandem::train
