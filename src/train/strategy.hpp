#pragma once
// How replicas agree on the update. The trainer calls these at fixed points
// of a step; Standalone only averages accumulated micro-batches, AllReduce
// and ParameterServer move gradients and parameters.
//
// Threads: every call below comes from the training thread. What runs on
// autograd's thread, during backward, is a strategy's own gradient hooks
// (GradientBuckets for all-reduce, GradientCapture for the servers): they
// hand a finished bucket or chunk to a communication thread (a PS push is
// rounded for a 16-bit wire first) and never call back into the trainer.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/training_mode.hpp"
#include "models/registry.hpp"
#include "obs/timeline.hpp"
#include "train/membership_change.hpp"

namespace tandem::train {

// Seconds of a step spent on synchronisation, split by cause.
struct SyncTimes {
  double exposed_comm = 0;  // communication compute did not hide
  double wait_workers = 0;  // waiting for slower peers
  double update = 0;        // applying the update, when the strategy does it (PS: copying pulled values in)
};

// The run's length, for strategies that need the schedule up front.
struct StepPlan {
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;  // 0: open-ended (the APIs: the user's loop decides)
  int64_t start_step = 0;
  // The run's optimizer, holding a resumed checkpoint's state if any.
  torch::optim::Optimizer* optimizer = nullptr;
  obs::Timeline* timeline = nullptr;  // --timeline: where the strategy's own work (transfers, sums) goes
  std::string resume_from;            // the checkpoint this run resumes from; "" for a fresh start
};

// What the trainer knows about a step when it hands it to the strategy.
struct LocalStep {
  double loss_sum = 0;          // sum of this worker's micro-batch mean losses
  int micro_steps = 1;          // micro-batches in this update (--accumulate)
  bool stop_requested = false;  // a local SIGINT/SIGTERM arrived
  bool leave_requested = false;  // a live job's worker asked to leave it (SIGUSR2)
  // Micro-batch gradients add up instead of averaging, as Horovod's
  // backward_passes_per_step does (the APIs).
  bool sum_micro_steps = false;
  // The chief wants a checkpoint; a strategy whose replicas agree only at
  // some steps (DiLoCo) carries the wish to the next such step.
  bool checkpoint_requested = false;
};

// What all workers agreed on for the step.
struct AgreedStep {
  SyncTimes times;
  double loss = 0;      // mean loss over every worker's micro-batches
  bool stop = false;    // some worker asked to stop: everyone ends after this step
  int64_t global_step = -1;  // the job's steps after this one, when the strategy counts them (else -1)
  bool finished = false;     // shared steps: the job's last step is granted; end here
  // Every worker holds the same parameters after this step (false between
  // DiLoCo's outer updates): what an evaluation or checkpoint may read.
  bool replicas_agree = true;
  bool checkpoint = false;  // StepPolicy::checkpoints_by_agreement: every worker checkpoints at this step
  // A live job's members changed at this step boundary (train/live_membership.hpp).
  std::optional<MembershipChange> membership;
};

// Parameters that arrive after the step, while the next forward runs
// (a parameter server with priority scheduling): the trainer awaits each
// stage's parameters before that stage reads them.
class GatedParameters {
 public:
  virtual ~GatedParameters() = default;
  // The caller promises to call awaitParameters before anything reads the
  // parameters after synchronizeGradients: from then on,
  // synchronizeGradients may return while the next step's values are still
  // arriving, first layers first.
  virtual void allowGatedParameters() = 0;
  // Waits until the first `count` trainable parameters (registration order)
  // hold the update; by default all of them.
  virtual void awaitParameters(size_t count = SIZE_MAX) = 0;
  // The time awaitParameters spent since the last call: waiting
  // (exposed_comm) and copying values in (update), to count in the step
  // whose forward it delayed.
  virtual SyncTimes takeParameterWaits() = 0;
};

// What a strategy whose parameters live on servers adds to a run: the job's
// end and a checkpoint's state come from the servers, and an elastic job's
// replacement worker takes over a clock.
class RemoteParameters {
 public:
  virtual ~RemoteParameters() = default;
  // After initialize(): set when this worker replaced one that died in a
  // running elastic job (async and SSP). It continues its predecessor's
  // clock and data shard from there.
  struct Takeover {
    int64_t job_start_step = 0;  // where the servers' job started
    int64_t clock = 0;           // the predecessor's clock: that start plus the steps it finished
    bool finished = false;       // async: every step of the job was granted before it came
  };
  virtual std::optional<Takeover> takeover() const = 0;
  // Worker 0, after its last step and before its final evaluation and
  // checkpoint: waits until every other worker's last update is in, and
  // brings the final parameters into the model. Returns the job's step.
  virtual int64_t awaitJobEnd(int64_t own_step) = 0;
  // Before worker 0 saves a checkpoint: brings the parameters and optimizer
  // state into the model and `optimizer`. Returns the job's step they are of
  // when it is not the caller's own count (async: a consistent snapshot of
  // every chunk at one global step, taken while the other workers pause).
  virtual std::optional<int64_t> prepareCheckpoint(torch::optim::Optimizer& optimizer) = 0;
  // State the servers keep besides the run's optimizer's (DiLoCo's outer
  // optimizer), filled by prepareCheckpoint; null when there is none.
  virtual torch::optim::Optimizer* outerOptimizer() { return nullptr; }
  // After worker 0 saved the checkpoint prepareCheckpoint prepared.
  virtual void checkpointSaved() {}

  // The APIs' open-ended runs, which name no last step and no schedule.
  // The rate the servers apply to this worker's next gradients, replacing
  // the schedule. DiLoCo sends none: the servers' outer rate is
  // --outer-lr's, and the inner one is the caller's own optimizer's.
  virtual void setLearningRate(double lr) {}
  // Before the job's end: closes what the last steps left open, so that
  // every worker holds the job's model (DiLoCo: a partial last round).
  // Sync: every worker calls it after the same steps.
  virtual void settleOpenRun(torch::nn::Module& model) {}
};

// Replicas that must stay equal, and can be compared (all-reduce).
class ReplicaCheck {
 public:
  virtual ~ReplicaCheck() = default;
  // Throws Error naming the workers whose parameters differ from worker 0's.
  virtual void verifyReplicas(torch::nn::Module& model, int64_t step) = 0;
};

// How a mode's steps go, decided once per run: the trainer reads it at
// start instead of asking the strategy at each step.
struct StepPolicy {
  // This worker runs the optimizer; false: the servers apply the update.
  bool worker_applies_updates = true;
  // One update averages every worker's batch (linear LR scaling then counts workers).
  bool averages_worker_batches = true;
  // Each worker's step is one of the job's shared global steps (async:
  // --max-steps and epochs count the job's steps, and synchronizeGradients
  // reports the global step).
  bool shares_job_steps = false;
  // Periodic checkpoints are taken where AgreedStep::checkpoint says, by
  // every worker (each keeps state of its own), instead of by the chief alone.
  bool checkpoints_by_agreement = false;
  // Worker 0 started again into the running job is the chief again: the
  // servers hold the job's state, so it takes the run directory's metrics,
  // checkpoints and summary back (every PS mode; DiLoCo's chief is not).
  bool chief_comes_back = false;
};

// The policy of a mode whose gradients travel every step.
constexpr StepPolicy stepPolicyOf(Mode mode) {
  return {.worker_applies_updates = !usesServers(mode),
          .averages_worker_batches = mode != Mode::PsAsync && mode != Mode::Ssp,
          .shares_job_steps = mode == Mode::PsAsync,
          .checkpoints_by_agreement = false,
          .chief_comes_back = usesServers(mode)};
}

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual Mode mode() const = 0;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual int serverCount() const { return 0; }
  // Joins the cluster (checking that every task's `fingerprint` agrees) and
  // makes every replica start from the same parameters and buffers.
  virtual void initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) = 0;
  // After initialize(), once: when this worker joined a running job with a
  // live membership, the generation that took it in. The trainer adopts it
  // (data position, schedule) before its first step; its broadcast is live
  // until then.
  virtual std::optional<MembershipChange> takeJoinedMembership() { return std::nullopt; }
  // Called before each micro-batch's backward (after its forward): `so_far`
  // counts this micro-batch's loss; `micro_step` is its index, and the
  // last one (so_far.micro_steps - 1) completes the update's gradient.
  virtual void beforeBackward(const LocalStep& so_far, int micro_step) {}
  // Called after the last backward of an update. On return every parameter's
  // .grad holds the mean gradient the update must use.
  virtual AgreedStep synchronizeGradients(torch::nn::Module& model, const LocalStep& local) = 0;
  // Called after the worker's optimizer step (policy().worker_applies_updates), before
  // the step is counted: may exchange parameters and amend `agreed`.
  // Returns the time it spent.
  virtual SyncTimes afterUpdate(torch::nn::Module& model, AgreedStep& agreed) { return {}; }
  // How this strategy's steps go (stepPolicyOf its mode unless it differs).
  virtual StepPolicy policy() const { return stepPolicyOf(mode()); }
  // After the last step: waits for peers so nobody leaves mid-collective.
  virtual void finish() {}
  // Strategy-specific figures for the run summary.
  virtual nlohmann::json summary() const { return nlohmann::json::object(); }
  // What the mode adds to a run, if anything: parameters that live on
  // servers, or replicas that can be compared. Null when it adds nothing.
  virtual RemoteParameters* remoteParameters() { return nullptr; }
  virtual GatedParameters* gatedParameters() { return nullptr; }
  virtual ReplicaCheck* replicaCheck() { return nullptr; }
};

// Turns summed micro-batch gradients into their mean and reports the mean
// loss: the whole synchronisation when there is one worker.
AgreedStep averageMicroBatches(torch::nn::Module& model, const LocalStep& local);

// Averages accumulated micro-batch gradients; no communication.
class StandaloneStrategy final : public Strategy {
 public:
  Mode mode() const override { return Mode::Standalone; }
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  void initialize(torch::nn::Module&, const nlohmann::json&, const StepPlan&) override {}
  AgreedStep synchronizeGradients(torch::nn::Module& model, const LocalStep& local) override {
    return averageMicroBatches(model, local);
  }
};

}  // namespace tandem::train
