#pragma once
// One run of the training loop, in the order it happens (Trainer::run is
// its outline): set up, join the cluster, open the input and the logs, step
// until done, end, summarise. Each step: input, forward and backward (the
// strategy's gradient hooks run on autograd's thread meanwhile), the
// strategy's synchronisation, the update, then the cadences (log, eval,
// replica check, checkpoint).
#include <torch/torch.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/clock.hpp"
#include "data/dataset.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "obs/metrics_writer.hpp"
#include "obs/progress.hpp"
#include "obs/step_breakdown.hpp"
#include "obs/timeline.hpp"
#include "train/blas_check.hpp"
#include "train/config.hpp"
#include "train/device_feeder.hpp"
#include "train/emulated_compute.hpp"
#include "train/evaluator.hpp"
#include "train/loss.hpp"
#include "train/loss_watch.hpp"
#include "train/loss_scale.hpp"
#include "train/lr_schedule.hpp"
#include "train/run_placement.hpp"
#include "train/runtime_info.hpp"
#include "train/step_cadence.hpp"
#include "train/step_timer.hpp"
#include "train/strategy.hpp"
#include "train/trainer.hpp"

namespace tandem::train {

class TrainingRun {
 public:
  // Sets up: threads, data, model, device, schedule and optimizer; restores
  // the checkpoint to resume from and, on the chief, prepares the run
  // directory. Throws InputError for what cannot run. `context`: the job's
  // start, where the run records that startup is over and how far it got,
  // and its entry point's environment (which GPU library, which devices).
  TrainingRun(const TrainConfig& config, Strategy& strategy, cluster::JobContext& context,
              const std::atomic<bool>* stop, const TrainerParts& parts);
  // On an exception, still records the last finished step for the launcher.
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // The cluster agrees on the run, and every replica starts from the same
  // parameters and buffers.
  void join();
  // A rerun of a finished run: nothing to train. After join(), so that peers
  // and servers are told and end at once too.
  bool finishedBefore() const { return nothing_to_do_; }
  nlohmann::json summaryOfFinishedRun();
  // Prefetching from this worker's place in the data, metrics, progress.
  void openInputAndLogs();
  bool stepsLeft() const;
  void step();
  // The job's last update in, the final checkpoint and evaluation, peers
  // released.
  void end();
  // Also written to summary.json.
  nlohmann::json summary();

 private:
  // Page faults from the end of the second step: the first maps the optimizer
  // state and the allocator's pools, and the second may map a second
  // generation of gradients while the first is still held (0 to 16k faults on
  // the MLP, by timing). Neither says anything about a step.
  static constexpr int64_t kWarmupSteps = 2;
  void evaluateAt(int64_t done_steps);
  void saveAt(bool periodic, int64_t done_steps);
  bool stopRequested() const { return stop_ != nullptr && stop_->load(); }
  // A step's phases, in order. Forward and backward of each micro-batch;
  // the strategy's hooks take the gradients meanwhile.
  LocalStep computeGradients(StepTimer& timer, bool checkpoint_requested);
  // The worker's own update, if it applies one, then the strategy's.
  void applyUpdate(StepTimer& timer, AgreedStep& agreed, double lr);
  // Counts the step; returns the job's step before it.
  int64_t advance(const AgreedStep& agreed);
  // The cadences that fell due: log, eval, replica check, checkpoint.
  void afterStep(int64_t before, double lr, const AgreedStep& agreed, double step_seconds);
  // Prefetching from local_ to local_end_ with the current sampler.
  void startInput();
  // A live job's new members copy the source's place in the data and its
  // loss scale: a collective over the new communicator, which every member
  // calls right after the change's heal, a joiner included, before any
  // other collective. Returns the position the sampler goes on from.
  data::DataPosition copySourcePlace(const MembershipChange& change);
  // Then the sampler and input of this worker's new rank from `position`,
  // the rate for the new worker count, and the record of the change.
  // `joining`: this worker's first generation.
  void adoptMembership(const MembershipChange& change, const data::DataPosition& position, bool joining = false);
  void scheduleFor(int workers);
  // A live job's run directory belongs to its rank 0 of the moment: worker
  // 0 died and another took over, or it came back and took it again.
  void followChief(int rank);
  // Where this worker's records go: --out while it is rank 0, own_dir_ else.
  const std::filesystem::path& runDirectory() const { return chief_ ? out_dir_ : own_dir_; }

  // Setup.
  Stopwatch wall_;
  const TrainConfig& c_;
  Strategy& strategy_;
  const StepPolicy policy_;  // the strategy's, read once
  cluster::JobStart& start_;
  const std::atomic<bool>* stop_;
  int threads_ = 1;
  RuntimeInfo runtime_;
  BlasReport blas_;
  data::DatasetSplits splits_;
  models::ModelPtr model_;
  LossFunction loss_fn_;
  std::unique_ptr<EmulatedCompute> emulated_;  // --emulate-compute: timed waits instead of forward and backward
  RunPlacement placement_;
  int world_ = 1;
  std::optional<data::ShardSampler> sampler_;
  int64_t steps_per_epoch_ = 1;
  int64_t total_steps_ = 1;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<LrSchedule> schedule_;
  bool chief_ = false;
  bool chief_returned_ = false;  // worker 0 started again into its running job
  std::filesystem::path out_dir_;
  std::filesystem::path own_dir_;  // a worker's records beside the chief's, while it is not rank 0
  std::string resume_from_;       // "" for a fresh start
  bool resume_automatic_ = false;  // found in --out rather than given with --resume
  int64_t start_step_ = 0;
  bool nothing_to_do_ = false;
  LossScale loss_scale_;  // fp16 only
  bool gated_ = false;    // the model's stages wait for the strategy's parameters
  std::optional<StepCadence> cadence_;  // log, eval, replica check, checkpoint
  LossWatch loss_watch_;
  RemoteParameters* remote_ = nullptr;  // the strategy's, when its parameters live on servers (from join)
  GatedParameters* arriving_ = nullptr;  // the strategy's, when they arrive behind the next forward (from join)
  // Parameters that live in the model are always there: these wait only for arriving ones.
  void awaitParameters(size_t count = SIZE_MAX) {
    if (arriving_) arriving_->awaitParameters(count);
  }
  SyncTimes takeParameterWaits() { return arriving_ ? arriving_->takeParameterWaits() : SyncTimes{}; }

  std::optional<obs::Timeline> timeline_;  // --timeline (from join on): written when the run ends

  // Input and logs (openInputAndLogs).
  std::optional<obs::MetricsWriter> writer_;
  int64_t param_count_ = 0;
  int64_t local_ = 0, local_end_ = 0;  // this worker's own steps, which index its data
  std::unique_ptr<data::Prefetcher> prefetcher_;
  std::unique_ptr<DeviceFeeder> feeder_;  // reads prefetcher_: goes first
  data::PrefetchOptions prefetch_options_;
  int64_t membership_changes_ = 0;
  // The job's samples up to the last change of members, and its step then:
  // later steps hold samples_per_job_step_ each.
  int64_t samples_before_change_ = 0;
  int64_t steps_before_change_ = 0;
  std::optional<obs::Progress> progress_;
  int uncaught_at_start_ = 0;
  obs::StepBreakdown breakdown_;
  int64_t global_batch_ = 0;
  int64_t samples_per_job_step_ = 0;  // with shared steps one worker's batch, else every worker's
  std::vector<torch::Tensor> parameters_;

  // Steps.
  struct IntervalStats {  // between two log lines
    double loss_sum = 0;
    double seconds = 0;        // step time only: evaluation and checkpoints excluded
    int64_t steps = 0;         // this worker's
    int64_t global_steps = 0;  // the job's
    int64_t samples = 0;       // in the job's steps, each at its own global batch
  };
  IntervalStats interval_;
  double train_seconds_ = 0;
  double final_loss_ = 0;  // mean loss of the last logged interval
  EvalResult last_eval_;
  // The job's global step: the loop's own count, or what ps 0 reports when
  // steps are shared. Cadences fire when it crosses them.
  int64_t done_ = 0;
  int64_t local_steps_ = 0;
  bool stop_agreed_ = false;   // a stop request: every worker ends after this step
  bool budget_spent_ = false;  // shared steps: ps 0 granted the last one
  Stopwatch loop_watch_;
  int64_t faults_after_warmup_ = 0;

  // End.
  int64_t end_step_ = 0;
  double loop_seconds_ = 0;
  int64_t steady_faults_ = 0;
};

}  // namespace tandem::train
