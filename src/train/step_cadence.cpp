#include "train/step_cadence.hpp"

namespace tandem::train {

DueAfterStep StepCadence::after(const StepOutcome& step) {
  const CadenceRules& r = rules_;
  DueAfterStep due;
  due.log = crossed(step.before, step.done, r.log_every) || step.last;
  const bool eval_due = crossed(step.before, step.done, r.eval_every > 0 ? r.eval_every : r.steps_per_epoch);
  eval_wanted_ = eval_wanted_ || eval_due;
  due.evaluate = r.chief && eval_wanted_ && step.replicas_agree && !step.last;
  if (step.replicas_agree) eval_wanted_ = false;
  due.verify_replicas = crossed(step.before, step.done, r.verify_every);
  const bool step_due = crossed(step.before, step.done, r.checkpoint_every);
  const bool time_due = r.checkpoint_secs > 0 && step.train_seconds - last_checkpoint_at_ >= r.checkpoint_secs;
  checkpoint_wanted_ = checkpoint_wanted_ || ((step_due || time_due) && r.chief);
  const bool save_now = r.checkpoints_by_agreement ? step.checkpoint_agreed : step.replicas_agree;
  due.checkpoint = save_now && checkpoint_wanted_ && r.chief && !step.last;
  if (save_now) checkpoint_wanted_ = false;
  return due;
}

}  // namespace tandem::train
