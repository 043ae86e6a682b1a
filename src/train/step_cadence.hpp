#pragma once
// What falls due after a training step: the log line, an evaluation, a
// replica check, a periodic checkpoint. Pure policy: it takes the step's
// numbers and says what to do; TrainingRun does it. Evaluations and
// checkpoints are of a model every worker holds, so when the replicas
// disagree (between DiLoCo's rounds) they wait for the next step after
// which they agree.
#include <cstdint>

namespace tandem::train {

// Whether a cadence of `every` steps fires between `before` and `after`.
constexpr bool crossed(int64_t before, int64_t after, int64_t every) {
  return every > 0 && before / every != after / every;
}

struct CadenceRules {
  int64_t log_every = 0;
  int64_t eval_every = 0;  // 0: once an epoch
  int64_t steps_per_epoch = 1;
  int64_t verify_every = 0;
  int64_t checkpoint_every = 0;
  double checkpoint_secs = 0;
  bool chief = false;  // evaluates and checkpoints
  // Every worker saves state at the chief's checkpoints (sync DiLoCo), so
  // they are taken when the job agrees on one, not when the replicas do.
  bool checkpoints_by_agreement = false;
};

struct StepOutcome {
  int64_t before = 0;  // the job's step before this one
  int64_t done = 0;    // and after it
  bool last = false;   // the run ends after it: the end checkpoints and evaluates
  bool replicas_agree = true;
  bool checkpoint_agreed = false;  // the job agreed on a checkpoint at this step
  double train_seconds = 0;        // step time so far
};

struct DueAfterStep {
  bool log = false;
  bool evaluate = false;
  bool verify_replicas = false;
  bool checkpoint = false;
};

class StepCadence {
 public:
  explicit StepCadence(const CadenceRules& rules) : rules_(rules) {}

  // Whether the chief wants a checkpoint at the step after `done`, told to
  // the strategy before the step (the job agrees on it); with shared steps
  // the job's step is known only after it.
  bool checkpointRequested(int64_t done, bool shares_job_steps) const {
    return checkpoint_wanted_ || (rules_.chief && !shares_job_steps && crossed(done, done + 1, rules_.checkpoint_every));
  }
  // Remembers what is due and waiting for agreeing replicas.
  DueAfterStep after(const StepOutcome& step);
  // The chief's role moved (a live job's rank 0 changed).
  void setChief(bool chief) { rules_.chief = chief; }
  // A checkpoint was written after `train_seconds` of steps.
  void saved(double train_seconds) { last_checkpoint_at_ = train_seconds; }

 private:
  CadenceRules rules_;
  bool eval_wanted_ = false;
  bool checkpoint_wanted_ = false;
  double last_checkpoint_at_ = 0;
};

}  // namespace tandem::train
