#include "train/training_run.hpp"

#include <sys/resource.h>

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <thread>
#include <type_traits>

#include "cluster/job_start.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/stop_request.hpp"
#include "train/checkpoint.hpp"
#include "train/fused_step.hpp"
#include "train/mixed_precision.hpp"
#include "train/model_for_dataset.hpp"
#include "train/optimizer.hpp"
#include "train/run_directory.hpp"
#include "train/run_start.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

namespace {

int64_t minorFaults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace

TrainingRun::TrainingRun(const TrainConfig& config, Strategy& strategy, cluster::JobContext& context,
                         const std::atomic<bool>* stop, const TrainerParts& parts)
    : c_(config), strategy_(strategy), policy_(strategy.policy()), start_(context.start()), stop_(stop), uncaught_at_start_(std::uncaught_exceptions()) {
  const TrainConfig& c = c_;
  loss_watch_ = LossWatch(10, 0.7, c.stop_on_collapse == Switch::kOn);
  threads_ = c.threads > 0 ? c.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Emulated compute computes next to nothing, and idle OpenMP threads spin:
  // 2 threads cost 95 ms of CPU per resnet110 step, 1 thread 6 ms.
  if (!c.emulate_compute.empty()) threads_ = 1;
  torch::set_num_threads(threads_);

  // Before anything runs on a GPU: cuBLAS reads its workspace setting when
  // it makes its first handle.
  if (c.deterministic) requireDeterministicKernels();
  runtime_ = runtimeInfo(context.environment());
  blas_ = checkBlas(runtime_);
  if (auto advice = blasAdvice(blas_); !advice.empty()) TANDEM_LOG_WARN("{}", advice);

  splits_ = parts.data ? *parts.data : data::openDataset(c.dataset);
  torch::manual_seed(static_cast<uint64_t>(c.seed));
  model_ = parts.model ? parts.model : createModelFor(c, *splits_.train);
  loss_fn_ = parts.loss ? parts.loss : lossFunction(c.loss);
  if (!c.emulate_compute.empty()) {
    const auto shape = splits_.train->shape();
    emulated_ = std::make_unique<EmulatedCompute>(*model_, loadComputeProfile(c.emulate_compute),
                                                  std::vector<int64_t>{shape.channels, shape.height, shape.width});
  }
  model_->train();
  placement_ = placeRun(c, *model_, parts.model != nullptr, emulated_ != nullptr, strategy_.mode(),
                        !policy_.worker_applies_updates, context.environment());

  // The sampler counts micro-batches; an update consumes `accumulate` of them.
  world_ = strategy_.worldSize();
  // A worker beyond the starting ones (--max-workers) has no share of the
  // starting batches: it takes one when it joins (adoptMembership).
  sampler_.emplace(splits_.train->size(), c.batch_size, std::min(strategy_.rank(), world_ - 1), world_, c.seed);
  if (sampler_->stepsPerEpoch() < c.accumulate) {
    throw InputError(fmt::format("--accumulate: {} micro-batches per update exceed the {} an epoch holds",
                                 c.accumulate, sampler_->stepsPerEpoch()));
  }
  // Async PS: every worker's step is one of the job's global steps, so an
  // epoch (each worker's slice of every global batch) is `world` of them.
  steps_per_epoch_ = sampler_->stepsPerEpoch() / c.accumulate * (policy_.shares_job_steps ? world_ : 1);
  total_steps_ = c.max_steps > 0 ? c.max_steps : c.epochs * steps_per_epoch_;
  optimizer_ = makeOptimizer(c.optimizer, model_->parameters());
  const int averaged_workers = policy_.averages_worker_batches ? world_ : 1;
  scheduleFor(averaged_workers);

  // Worker 0 owns the run directory; the others keep their own metrics
  // beside it, so a straggler's breakdown can be read after the run. A
  // replacement joining a running live job owns nothing until it is rank 0;
  // one for an async or SSP chief is the chief again, in the same directory.
  chief_ = strategy_.rank() == 0 && (!start_.joins_running || policy_.chief_comes_back);
  own_dir_ = fs::path(c.out_dir) / "workers" / fmt::format("worker-{}", strategy_.rank());
  cadence_.emplace(CadenceRules{.log_every = c.log_every_steps,
                                .eval_every = c.eval_every_steps,
                                .steps_per_epoch = steps_per_epoch_,
                                .verify_every = c.distributed.verify_replicas_every,
                                .checkpoint_every = c.checkpoint_every_steps,
                                .checkpoint_secs = c.checkpoint_secs,
                                .chief = chief_,
                                .checkpoints_by_agreement = policy_.checkpoints_by_agreement});
  out_dir_ = c.out_dir;
  // A replacement joining a running job takes a peer's state, not a file's.
  const RunDirectoryPlan plan = start_.joins_running ? RunDirectoryPlan{} : planRunDirectory(c, chief_);
  resume_from_ = plan.resume_from;
  resume_automatic_ = plan.automatic;
  if (!resume_from_.empty()) {
    LoadedCheckpoint checkpoint(resume_from_);
    checkResumeCompatible(c, trainConfigFromJson(checkpoint.meta().config), resume_from_);
    checkpoint.restore(*model_, optimizer_.get(), /*restore_rng=*/true);
    start_step_ = checkpoint.meta().global_step;
    if (start_step_ >= total_steps_) {
      if (resume_automatic_) {
        TANDEM_LOG_INFO("{} already holds this run at step {} of {}: nothing to do (raise --max-steps or --epochs "
                        "to train on, or pass --overwrite to start again)",
                        c.out_dir, start_step_, total_steps_);
        nothing_to_do_ = true;
      } else {
        throw InputError(fmt::format("checkpoint {} is at step {}, at or past this run's {} steps: nothing to do",
                                     resume_from_, start_step_, total_steps_));
      }
    }
    if (!nothing_to_do_) TANDEM_LOG_INFO("resumed from {} at step {}", resume_from_, start_step_);
  }
  // Restored on the CPU, then moved: the optimizer's parameters keep their identity.
  const torch::Device& device = placement_.device.device;
  if (!device.is_cpu()) {
    model_->to(device);
    if (!resume_from_.empty()) moveOptimizerState(*optimizer_, device);
  }
  if (c.channels_last) toChannelsLast(*model_);
  if (chief_ && !start_.joins_running) claimRunDirectory(c, plan, start_step_);
}

TrainingRun::~TrainingRun() {
  // A failing worker still tells its launcher the last step it finished
  // (launch --max-restarts counts the updates a restart loses from it).
  if (progress_ && std::uncaught_exceptions() > uncaught_at_start_) progress_->flushRecord();
  if (gated_) model_->setParameterGate(nullptr);
}

void TrainingRun::join() {
  if (c_.timeline) {
    // Open before the strategy joins: its transfers and sums are spans too.
    const int rank = strategy_.rank();
    timeline_.emplace(runDirectory() / fmt::format("timeline-worker-{}.json", rank), fmt::format("worker {}", rank), rank);
  }
  obs::Timeline* timeline = timeline_ ? &*timeline_ : nullptr;
  strategy_.initialize(*model_, runFingerprint(c_, *model_, splits_.train->size(), start_step_, world_),
                       {steps_per_epoch_, total_steps_, start_step_, optimizer_.get(), timeline, resume_from_});
  start_.training = true;  // startup is over: a failure from here on may restart in place
  remote_ = strategy_.remoteParameters();
  arriving_ = strategy_.gatedParameters();
  if (!arriving_) return;
  arriving_->allowGatedParameters();  // every read below awaits them first
  // A built-in model's stages each wait for their own parameters.
  model_->setParameterGate([this](size_t count) { arriving_->awaitParameters(count); });
  gated_ = true;
}

void TrainingRun::openInputAndLogs() {
  const TrainConfig& c = c_;
  // Copied out of the optional: GCC 12 took its later reads for reads of
  // an uninitialized payload (-Wmaybe-uninitialized).
  const auto takeover = remote_ ? remote_->takeover() : std::nullopt;
  const bool took_over = takeover.has_value();
  const int64_t taken_clock = took_over ? takeover->clock : 0;
  const int64_t job_start = took_over ? takeover->job_start_step : start_step_;
  // Came after the job's last step was granted: it makes none.
  budget_spent_ = took_over ? takeover->finished : false;
  // A chief back in its running job writes the job's records on: the job
  // started where it did, and this process's rates count from here.
  chief_returned_ = chief_ && took_over;
  if (chief_returned_) start_step_ = job_start;
  writer_.emplace(runDirectory());
  if (start_step_ > 0 && !chief_returned_) {
    writer_->append({{"type", "resume"}, {"step", start_step_}, {"checkpoint", resume_from_}});
  }
  if (chief_returned_) writer_->append({{"type", "chief_returned"}, {"worker_clock", taken_clock}});
  param_count_ = models::countParameters(*model_);
  const TrainingDevice& device = placement_.device;
  TANDEM_LOG_INFO("training {} ({} parameters) on {} ({} samples), {} mode, {} worker(s), {} steps of {} per worker, "
                  "on {} ({}), {} threads, BLAS {}",
                  c.model, param_count_, c.dataset.name, splits_.train->size(), modeName(strategy_.mode()), world_,
                  total_steps_ - start_step_, c.batch_size, device.device.str(), device.reason, threads_,
                  blas_.library);

  // This worker's own steps index its data: with shared steps it starts at
  // its share of the job's and may, at most, do all that remain.
  // A replacement in a running elastic job reads on where its predecessor
  // stopped, in the same shard.
  local_ = policy_.shares_job_steps ? job_start / world_ : job_start;
  if (took_over) local_ += taken_clock - job_start;
  local_end_ = local_ + std::max<int64_t>(0, total_steps_ - start_step_);
  // On a machine whose cores the compute threads already fill, a prefetch
  // thread preempts one of them and the whole OpenMP team waits for it: the
  // cnn ran 4-14% slower with one (docs/results/standalone.md).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // On a GPU the cores only build batches: one thread does it ahead.
  const bool on_gpu = device.device.is_cuda();
  const int prefetch_threads =
      c.prefetch_threads >= 0 ? c.prefetch_threads
                              : (!on_gpu && threads_ * std::max(1, c.local_processes) >= cores ? 0 : 1);
  prefetch_options_ = data::PrefetchOptions{prefetch_threads, c.prefetch_depth, c.seed};
  prefetch_options_.pin_memory = on_gpu;
  startInput();
  progress_.emplace(start_step_, total_steps_, c.progress);
  global_batch_ = c.batch_size * world_ * c.accumulate;
  samples_per_job_step_ = policy_.shares_job_steps ? c.batch_size * c.accumulate : global_batch_;
  steps_before_change_ = start_step_;
  parameters_ = model_->parameters();
  done_ = took_over && !policy_.shares_job_steps ? taken_clock : start_step_;
  if (auto joined = strategy_.takeJoinedMembership()) {
    adoptMembership(*joined, copySourcePlace(*joined), /*joining=*/true);
  }
  loop_watch_ = Stopwatch();
}

void TrainingRun::startInput() {
  const int64_t accumulate = c_.accumulate;
  const torch::Device& device = placement_.device.device;
  feeder_.reset();
  prefetcher_ = std::make_unique<data::Prefetcher>(splits_.train, *sampler_, local_ * accumulate,
                                                   local_end_ * accumulate, prefetch_options_);
  feeder_ = std::make_unique<DeviceFeeder>([this] { return prefetcher_->next(); }, (local_end_ - local_) * accumulate,
                                           device.is_cuda() ? makeStreamCopier(device) : nullptr);
}

void TrainingRun::scheduleFor(int workers) {
  // Linear scaling counts the samples one update averages over.
  schedule_.emplace(c_.optimizer, c_.lr, steps_per_epoch_, total_steps_,
                    static_cast<double>(workers * c_.accumulate));
}

data::DataPosition TrainingRun::copySourcePlace(const MembershipChange& change) {
  // A joiner has no history to find the job's place in its data from, and
  // one behind is a step short of it: the source's goes to everyone.
  data::DataPosition position =
      change.healing() && !change.is_source ? data::DataPosition{} : sampler_->positionAt(change.step * c_.accumulate);
  static_assert(std::is_trivially_copyable_v<LossScale>);
  if (change.healing()) {
    change.broadcast(&position, sizeof(position));
    change.broadcast(&loss_scale_, sizeof(loss_scale_));
  }
  return position;
}

void TrainingRun::adoptMembership(const MembershipChange& change, const data::DataPosition& position, bool joining) {
  const TrainConfig& c = c_;
  // A joiner's run starts where it came in, with a peer's state, not a file's.
  if (joining) {
    steps_before_change_ = start_step_ = change.step;
    resume_from_.clear();
  }
  const int64_t micro_step = change.step * c.accumulate;
  followChief(change.rank);
  const int before = world_;
  world_ = change.world;
  done_ = change.step;
  local_ = done_;
  local_end_ = local_ + std::max<int64_t>(0, total_steps_ - done_);
  start_.finished_steps = done_;
  sampler_.emplace(splits_.train->size(), c.batch_size, change.rank, world_, c.seed, true, micro_step, position);
  startInput();
  // The samples of the steps so far keep the batch they had.
  samples_before_change_ += (done_ - steps_before_change_) * samples_per_job_step_;
  steps_before_change_ = done_;
  global_batch_ = c.batch_size * world_ * c.accumulate;
  samples_per_job_step_ = global_batch_;
  const double lr_before = schedule_->at(done_);
  scheduleFor(policy_.averages_worker_batches ? world_ : 1);
  ++membership_changes_;

  const std::string lr_text = c.lr.scaling == LrScaling::kLinear
                                  ? fmt::format("; --lr-scaling linear: lr {:.6g} -> {:.6g}", lr_before, schedule_->at(done_))
                                  : "";
  progress_->message(describeChange(change, before, lr_text));
  writer_->append({{"type", "membership"}, {"step", done_}, {"generation", change.generation},
                   {"workers", world_}, {"rank", change.rank}});
  if (chief_) obs::appendJsonLine(out_dir_ / "restarts.jsonl", changeRecord(change, before));
}

void TrainingRun::followChief(int rank) {
  const bool chief = rank == 0;
  if (chief == chief_) return;
  chief_ = chief;
  cadence_->setChief(chief);
  writer_.emplace(runDirectory());
  progress_->message(chief ? fmt::format("rank 0 now: this worker writes {}'s metrics, checkpoints and summary", c_.out_dir)
                           : fmt::format("rank {} now: a worker that came back is rank 0 and writes {}", rank, c_.out_dir));
}

bool TrainingRun::stepsLeft() const {
  return local_ < local_end_ && done_ < total_steps_ && !stop_agreed_ && !budget_spent_;
}

void TrainingRun::evaluateAt(int64_t done_steps) {
  if (emulated_) return;  // no real forward to evaluate
  awaitParameters();
  last_eval_ = evaluate(*model_, *splits_.test, c_.eval_batch_size, loss_fn_);
  writer_->append({{"type", "eval"}, {"step", done_steps}, {"epoch", done_steps / steps_per_epoch_},
                   {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss}});
  progress_->message(fmt::format("eval at step {}: test accuracy {:.4f}, test loss {:.4f}", done_steps,
                                 last_eval_.accuracy, last_eval_.loss));
}

// A periodic checkpoint goes to checkpoints/step-N.ckpt, the final one to
// checkpoint.ckpt. N is the step the state is of: with async parameter
// servers a snapshot may include steps others made since `done_steps`.
void TrainingRun::saveAt(bool periodic, int64_t done_steps) {
  const int64_t step = (remote_ ? remote_->prepareCheckpoint(*optimizer_) : std::nullopt).value_or(done_steps);
  const fs::path path =
      periodic ? out_dir_ / "checkpoints" / fmt::format("step-{}.ckpt", step) : out_dir_ / "checkpoint.ckpt";
  saveCheckpoint(path, {toJson(c_), step, step / steps_per_epoch_, modelFingerprint(*model_)}, *model_,
                 optimizer_.get(), remote_ ? remote_->outerOptimizer() : nullptr);
  if (remote_) remote_->checkpointSaved();
  recordLatest(out_dir_, path);
  if (periodic) pruneCheckpoints(out_dir_, step, c_.keep_checkpoints);
  cadence_->saved(train_seconds_);
}

void TrainingRun::step() {
  // Parameters awaited between steps (an evaluation, a checkpoint) are not
  // this step's.
  takeParameterWaits();
  Stopwatch step_watch;
  StepTimer timer(breakdown_, timeline_ ? &*timeline_ : nullptr);
  const double lr = schedule_->at(done_);
  setLearningRate(*optimizer_, lr);
  // A checkpoint this step is due for must reach the strategy now.
  const LocalStep local = computeGradients(timer, cadence_->checkpointRequested(done_, policy_.shares_job_steps));
  AgreedStep agreed = strategy_.synchronizeGradients(*model_, local);
  if (agreed.membership) {
    // The step failed with a worker: the new members do it again.
    adoptMembership(*agreed.membership, copySourcePlace(*agreed.membership));
    return;
  }
  timer.span("synchronize", {{"exposed_comm_ms", agreed.times.exposed_comm * 1e3},
                             {"wait_workers_ms", agreed.times.wait_workers * 1e3}});
  timer.add(obs::Phase::kExposedComm, agreed.times.exposed_comm);
  timer.add(obs::Phase::kWaitWorkers, agreed.times.wait_workers);
  timer.lap();
  applyUpdate(timer, agreed, lr);
  // A change at this boundary: the members copy the source's place now, in
  // the order a joiner does, which has no step of its own to finish first.
  const std::optional<data::DataPosition> place =
      agreed.membership ? std::optional(copySourcePlace(*agreed.membership)) : std::nullopt;
  const int64_t before = advance(agreed);
  timer.spanStep(done_);
  if (agreed.stop && done_ < total_steps_ && !budget_spent_) {
    stop_agreed_ = true;
    progress_->message(fmt::format("stop requested: ending after step {} with a checkpoint", done_));
  }
  if (const auto collapse = loss_watch_.observe(done_, agreed.loss)) {
    throw Error(fmt::format("training collapsed: {}. {}", collapse->describe(loss_watch_.window()),
                            collapseAdvice(c_, lr, !policy_.averages_worker_batches)));
  }
  afterStep(before, lr, agreed, step_watch.elapsed());
  ++local_;
  if (agreed.membership) adoptMembership(*agreed.membership, *place);
}

LocalStep TrainingRun::computeGradients(StepTimer& timer, bool checkpoint_requested) {
  const TrainConfig& c = c_;
  const torch::Device& device = placement_.device.device;
  const Amp amp = placement_.amp;
  // Unset, not zeroed: backward then hands over fresh gradient tensors
  // instead of adding into buffers a strategy may still be reading.
  for (auto& p : parameters_) p.mutable_grad().reset();
  LocalStep local;
  local.micro_steps = static_cast<int>(c.accumulate);
  local.checkpoint_requested = checkpoint_requested;
  for (int micro = 0; micro < local.micro_steps; ++micro) {
    data::Batch batch = feeder_->next();
    timer.add(obs::Phase::kInputWait, timer.lap());
    timer.span("input wait");
    // Priority scheduling: an emulated layer or a built-in model's stage
    // waits for its own weights; a TorchScript forward for all of them.
    torch::Tensor loss;
    if (emulated_) {
      loss = emulated_->forward([&](size_t count) { awaitParameters(count); }, timer.timeline());
    } else {
      if (!model_->gatesStages()) awaitParameters();
      if (c.channels_last) batch.inputs = batch.inputs.contiguous(at::MemoryFormat::ChannelsLast);
      AutocastScope autocast(device, amp);
      loss = loss_fn_(model_->forward(batch.inputs), batch.targets);
    }
    local.loss_sum += loss.item<double>();
    local.stop_requested = stopRequested();
    local.leave_requested = leaveRequested();
    strategy_.beforeBackward(local, micro);
    if (amp == Amp::kFp16) {
      (loss * loss_scale_.scale()).backward();
    } else {
      loss.backward();
    }
    if (c.debug_step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.debug_step_delay_ms));
    // Waiting for the last step's parameters is communication, not compute.
    const SyncTimes awaited = takeParameterWaits();
    timer.add(obs::Phase::kForwardBackward, std::max(0.0, timer.lap() - awaited.exposed_comm - awaited.update));
    timer.add(obs::Phase::kExposedComm, awaited.exposed_comm);
    timer.add(obs::Phase::kUpdate, awaited.update);
    timer.span(emulated_ ? "forward+backward (emulated)" : "forward+backward",
               {{"awaited_parameters_ms", awaited.exposed_comm * 1e3}});
  }
  return local;
}

void TrainingRun::applyUpdate(StepTimer& timer, AgreedStep& agreed, double lr) {
  if (!policy_.worker_applies_updates) {
    timer.add(obs::Phase::kUpdate, agreed.times.update);
  } else {
    // fp16: every worker checks the same averaged gradients, so all of
    // them skip an overflowing step together.
    const bool apply =
        placement_.amp != Amp::kFp16 || loss_scale_.update(unscaleGradients(parameters_, loss_scale_.scale()));
    if (apply) fusedOptimizerStep(*optimizer_, c_.optimizer, lr);
    timer.add(obs::Phase::kUpdate, timer.lap());
  }
  timer.span("update");
  const SyncTimes after = strategy_.afterUpdate(*model_, agreed);
  timer.add(obs::Phase::kExposedComm, after.exposed_comm);
  timer.add(obs::Phase::kWaitWorkers, after.wait_workers);
  timer.add(obs::Phase::kUpdate, after.update);
  if (after.exposed_comm + after.wait_workers + after.update > 0) timer.span("outer update");
  breakdown_.endStep();
}

int64_t TrainingRun::advance(const AgreedStep& agreed) {
  // A returned chief's first step: the job's steps before it are not its.
  const int64_t before = chief_returned_ && local_steps_ == 0 && agreed.global_step > 0 ? agreed.global_step - 1 : done_;
  if (before != done_) steps_before_change_ = before;
  done_ = agreed.global_step >= 0 ? agreed.global_step : done_ + 1;
  start_.finished_steps = done_;  // how far a failed start got (train --restart-wait)
  if (++local_steps_ == kWarmupSteps) faults_after_warmup_ = minorFaults();
  budget_spent_ = policy_.shares_job_steps && agreed.finished;
  return before;
}

void TrainingRun::afterStep(int64_t before, double lr, const AgreedStep& agreed, double step_seconds) {
  const TrainConfig& c = c_;
  interval_.loss_sum += agreed.loss;
  ++interval_.steps;
  interval_.global_steps += done_ - before;
  interval_.samples += (done_ - before) * samples_per_job_step_;
  const int64_t epoch = (done_ - 1) / steps_per_epoch_;
  interval_.seconds += step_seconds;
  train_seconds_ += step_seconds;
  // The job's progress over this worker's time: with shared steps not its
  // own rate times the worker count.
  const double samples_per_sec =
      interval_.seconds > 0 ? static_cast<double>(interval_.samples) / interval_.seconds
                            : 0;
  const double worker_samples_per_sec =
      interval_.seconds > 0 ? static_cast<double>(interval_.steps * c.batch_size * c.accumulate) / interval_.seconds
                            : 0;
  const double interval_loss = interval_.loss_sum / static_cast<double>(interval_.steps);
  const bool last = done_ >= total_steps_ || stop_agreed_ || budget_spent_;
  const DueAfterStep due =
      cadence_->after({before, done_, last, agreed.replicas_agree, agreed.checkpoint, train_seconds_});
  if (due.log) {
    writer_->append({{"type", "train"}, {"step", done_}, {"worker_step", local_steps_}, {"epoch", epoch},
                     {"loss", interval_loss}, {"lr", lr},
                     {"samples_per_sec", samples_per_sec}, {"step_breakdown", breakdown_.toJson()}});
    final_loss_ = interval_loss;
    interval_ = IntervalStats{};
  }
  progress_->update({done_, epoch, interval_loss, samples_per_sec, lr, worker_samples_per_sec});
  // Only a model every worker holds is evaluated or saved.
  if (due.evaluate) evaluateAt(done_);
  // Not at a change of members: a joiner, which did not take this step,
  // makes no check at it, and the members' state was just copied from one.
  if (ReplicaCheck* check = strategy_.replicaCheck(); check && due.verify_replicas && !agreed.membership) {
    check->verifyReplicas(*model_, done_);
  }
  if (due.checkpoint) saveAt(/*periodic=*/true, done_);
}

void TrainingRun::end() {
  progress_->finish();
  // The chief's checkpoint and evaluation must hold every worker's last
  // update: with shared steps or bounded staleness others may still be
  // finishing theirs.
  end_step_ = done_;
  if (chief_ && remote_) end_step_ = remote_->awaitJobEnd(done_);
  loop_seconds_ = loop_watch_.elapsed();
  steady_faults_ = minorFaults() - faults_after_warmup_;
  // Saved first: with a 16-bit wire, preparing the checkpoint puts the
  // servers' float32 values into the model, and the evaluation is of those.
  if (chief_) saveAt(/*periodic=*/false, end_step_);
  if (chief_ && !stop_agreed_) evaluateAt(end_step_);
  // Last: parameter servers may leave once every worker has finished, and the
  // chief's checkpoint still needs their optimizer state.
  strategy_.finish();
}

}  // namespace tandem::train
